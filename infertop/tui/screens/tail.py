"""The tail view (key l): why one stage's slow calls are slow.

For the chosen stage (``s`` / ``S`` cycle the stages with timed calls): the slow-call threshold
and counts, the frames the slow calls spend more of their samples in than the typical calls,
the slowest calls, what the slow calls overlapped, and the slow calls' samples as a
differential flame against the typical calls' (``FlameList`` with a base, as ``replay --base``
draws it: red, a call path the slow calls have more of). The tails cost a join of samples to
calls, so the ingest worker computes them only while this view is open (``SetTails``); this
screen only shows ``Snapshot.tails`` and ``Snapshot.ui.tail_view``.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from infertop.analysis.flame import FlameNode
from infertop.analysis.flame_diff import BaseShares
from infertop.analysis.snapshot import Snapshot
from infertop.analysis.tail import StageTail
from infertop.analysis.tail_view import TailFlame
from infertop.tui.tail_rows import (
    default_stage,
    no_calls_line,
    no_samples_line,
    stage_order,
    tail_text,
)
from infertop.tui.widgets.flame import FlameList
from infertop.tui.widgets.flame_rows import breadcrumb, frame_detail

SHORT_BELOW = 40  # rows: under this the lists are cut to five rows, for the flame's sake


class TailFlameList(FlameList):
    """The slow calls' flame, coloured by growth against the typical calls' shares. Esc with
    nothing to zoom out of closes the view."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.tail: TailFlame | None = None

    def show_tail(self, snapshot: Snapshot, tail: TailFlame | None) -> None:
        self.tail = tail
        self.show(snapshot)

    @property
    def root(self) -> FlameNode | None:
        return self.tail.slow if self.tail is not None else None

    @property
    def base(self) -> BaseShares | None:
        return self.tail.typical if self.tail is not None else None

    def empty_text(self) -> str:
        return "no call samples inside the slow calls"

    def action_escape(self) -> None:
        if not self.pattern and not self.zoom:
            raise SkipAction()  # the screen's esc: close
        super().action_escape()

    def action_search(self) -> None:
        self.app.notify("search is in the main flame (close this view: esc)")


class TailScreen(ModalScreen[None]):
    """One stage's tail over the panels; redrawn with every snapshot while open."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("l", "close", "Close", show=False),
        Binding("s", "stage(1)", "Next stage"),
        Binding("S", "stage(-1)", "Previous stage", show=False),
        # under the open view: seek a replay, reshape the flame (as the main screen does)
        Binding("comma", "app.seek(-5)", "-5s", show=False),
        Binding("full_stop", "app.seek(5)", "+5s", show=False),
        Binding("z", "app.toggle_fold", "Fold", show=False),
        Binding("n", "app.toggle_lines", "Lines", show=False),
    ]

    DEFAULT_CSS = """
    TailScreen { align: center middle; }
    #tail-box {
        width: 100%; max-width: 150; height: 100%; max-height: 60;
        border: round $accent; background: $surface; padding: 0 1;
    }
    #tail-summary-box { height: auto; max-height: 65%; }
    #tail-flame-header {
        height: 1; background: #262626; color: #bcbcbc; text-style: bold;
        text-wrap: nowrap; text-overflow: ellipsis;
    }
    #tail-flame { height: 1fr; min-height: 3; }
    #tail-detail { height: 1; color: #bcbcbc; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, snapshot: Snapshot | None, stage: str | None = None) -> None:
        """``stage``: the main flame's stage filter, the first stage shown if it has a tail."""
        super().__init__()
        self.snapshot = snapshot
        self.prefer = stage
        self.stage: str | None = None
        self._mounted = False

    def compose(self) -> ComposeResult:
        with Vertical(id="tail-box") as box:
            box.border_title = "tail"
            box.border_subtitle = "s: next stage · ↑↓←→ enter: flame · esc: close"
            with VerticalScroll(id="tail-summary-box"):
                yield Static(id="tail-summary")
            yield Static(id="tail-flame-header")
            yield TailFlameList(id="tail-flame")
            yield Static(id="tail-detail")

    def on_mount(self) -> None:
        self._mounted = True
        self.show(self.snapshot)
        self.flame.focus()

    def on_unmount(self) -> None:
        self._mounted = False

    @property
    def flame(self) -> TailFlameList:
        return self.query_one(TailFlameList)

    @property
    def tails(self) -> tuple[StageTail, ...]:
        snap = self.snapshot
        return snap.tails if snap is not None and snap.ui.tail_view is not None else ()

    @property
    def tail(self) -> StageTail | None:
        return next((t for t in self.tails if t.stage == self.stage), None)

    def show(self, snapshot: Snapshot | None) -> None:
        """Redraw for a new snapshot, keeping the chosen stage while it has a tail."""
        self.snapshot = snapshot
        if not self._mounted:
            return
        order = stage_order(self.tails)
        if self.stage not in order:
            self.stage = default_stage(self.tails, self.prefer)
        self._draw()

    def _draw(self) -> None:
        snap, tail = self.snapshot, self.tail
        order = stage_order(self.tails)
        box = self.query_one("#tail-box")
        summary = self.query_one("#tail-summary", Static)
        flame = self.flame
        if tail is not None:
            where = f" ({order.index(tail.stage) + 1}/{len(order)})" if len(order) > 1 else ""
            box.border_title = f"tail · {tail.stage}{where}"
        else:
            box.border_title = "tail"
        sampled = snap is not None and no_samples_line(snap) is None
        if snap is None or snap.ui.tail_view is None:
            waiting = "computing the tails (slow calls against typical ones)…"
            summary.update(Text(waiting, style="dim italic"))
        elif tail is None:
            summary.update(Text(no_calls_line(snap), style="#d7af5f"))
        else:
            width = summary.content_region.width or self.app.size.width - 4
            summary.update(tail_text(snap, tail, width, short=self.app.size.height < SHORT_BELOW))
        shown = tail is not None and sampled
        for widget in (flame, self.query_one("#tail-flame-header"), self.query_one("#tail-detail")):
            widget.display = shown
        if tail is not None and sampled and snap is not None and snap.ui.tail_view is not None:
            flame.show_tail(snap, snap.ui.tail_view.flames.get(tail.stage))
        self._update_flame_lines()

    def _update_flame_lines(self) -> None:
        flame = self.flame
        if not flame.display:
            return
        width = max(20, self.query_one("#tail-box").content_region.width - 1)
        head = (
            " slow calls' samples vs typical calls' (red: more in slow calls, blue: less)  ·  "
            if width >= 110
            else " slow vs typical calls (red: more when slow)  ·  "
        )
        zoom, root = flame.zoom_node, flame.root
        share = ""
        if flame.zoom and zoom is not None and root is not None and root.total:
            share = f" ({zoom.total / root.total * 100:.1f}%)"
        crumb = breadcrumb(flame.zoom, max(8, width - len(head) - len(share)))
        self.query_one("#tail-flame-header", Static).update(Text(head + crumb + share))
        detail = frame_detail(
            flame.selected, root, zoom if flame.zoom else None, False, width, flame.base,
            "typical", flame.own_shares,
        )  # fmt: skip
        self.query_one("#tail-detail", Static).update(detail)

    def on_flame_list_changed(self, event: FlameList.Changed) -> None:
        event.stop()
        self._update_flame_lines()

    def on_resize(self) -> None:
        if self._mounted:
            self._draw()

    def action_stage(self, step: int) -> None:
        order = stage_order(self.tails)
        if not order:
            return
        i = order.index(self.stage) if self.stage in order else 0
        self.stage = order[(i + int(step)) % len(order)]
        self.flame.scroll_to(y=0, animate=False, immediate=True)
        self._draw()

    def action_close(self) -> None:
        self.dismiss(None)
