"""The replay timeline: play state, speed, a position bar and position / length."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from infertop.analysis.snapshot import ReplayState
from infertop.tui.palette import clock


def speed_text(speed: float) -> str:
    return f"{speed:g}×" if speed >= 1 else f"1/{1 / speed:g}×"


def render_timeline(state: ReplayState | None, width: int) -> Text:
    if state is None:
        return Text("replay: loading…", style="dim")
    row = Text(no_wrap=True, overflow="ellipsis")
    if state.playing:
        row.append(" ▶ playing ", style="bold black on #87d75f")
    else:
        row.append(" ⏸ paused  ", style="bold black on #d7af5f")
    row.append(f" {speed_text(state.speed):<6}", style="bold")
    where = f" {clock(state.position)} / {clock(state.length)}"
    bar_w = max(4, width - len(row) - len(where) - 1)
    frac = state.position / state.length if state.length > 0 else 1.0
    head = min(bar_w - 1, int(round(frac * (bar_w - 1))))
    # an incident's moment is a red ⚑ on the bar (the playhead wins its cell)
    marked = {
        min(bar_w - 1, int(round(m / state.length * (bar_w - 1))))
        for m in state.marks
        if state.length > 0 and 0 <= m <= state.length
    }
    cells = []
    for i in range(bar_w):
        if i == head:
            cells.append(("●", "bold #ffffff"))
        elif i in marked:
            cells.append(("⚑", "bold #ff5f5f"))
        else:
            cells.append(("━", "#5fafff") if i < head else ("─", "#4e4e4e"))
    run, style = "", None
    for ch, st in cells:  # one span per run of a style, as the bar always was drawn
        if st != style and run:
            row.append(run, style=style)
            run = ""
        run, style = run + ch, st
    if run:
        row.append(run, style=style)
    row.append(where, style="bold")
    return row


class Timeline(Widget):
    """One row under the panels, replay only."""

    DEFAULT_CSS = """
    Timeline { height: 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state: ReplayState | None = None

    def show(self, state: ReplayState | None) -> None:
        self.state = state
        self.refresh()

    @property
    def position_text(self) -> str:
        """``m:ss.s / m:ss.s`` as shown (what tests and screen readers look at)."""
        return (
            ""
            if self.state is None
            else f"{clock(self.state.position)} / {clock(self.state.length)}"
        )

    def render(self) -> Text:
        return render_timeline(self.state, self.content_region.width or 80)
