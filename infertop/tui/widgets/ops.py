"""The ops table: torch ops and kernels from the agent's profiler windows, by self time.

Rows come from ``Snapshot.torch.ops`` (every stage); the stage filter picks one stage's rows. When
no profiler window has arrived the table (and the torch-ops flame) says why in one line.
"""

from __future__ import annotations

import re
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from infertop.analysis.snapshot import Snapshot
from infertop.model.rows import OpRow
from infertop.tui.palette import stage_color

# (title, width, right-aligned) after the name column; shapes take what is left
COLUMNS = (("dev", 4, False), ("stage", 11, False), ("calls", 7, True),
           ("total ms", 9, True), ("self ms", 9, True), ("mean µs", 8, True))  # fmt: skip
HEADER_STYLE = Style(bold=True, color="#bcbcbc", bgcolor="#262626")
_TEMPLATE = re.compile(r"<.*>")


def short_name(name: str, width: int) -> str:
    """An op or kernel name in ``width`` cells: C++ kernel names lose ``void``, anonymous
    namespaces and template arguments first, then their leading namespaces."""
    if len(name) <= width:
        return name
    s = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    s = _TEMPLATE.sub("<…>", s)
    if len(s) <= width:
        return s
    return "…" + s[len(s) - width + 1 :] if width > 1 else "…"


def no_ops_reason(snapshot: Snapshot | None) -> str | None:
    """Why there is nothing to show in the ops views; None when there are op windows."""
    if snapshot is not None and snapshot.torch.windows:
        return None
    agent = next((s for s in snapshot.statuses if s.collector == "agent"), None) if snapshot else None
    if agent is None:
        return "no torch-profiler windows yet"
    message = agent.message.removeprefix("agent: ")
    if agent.state == "running":
        return f"no torch-profiler windows yet (agent: {message or 'running'})"
    return f"agent: {message or agent.state}"


def visible_rows(snapshot: Snapshot | None) -> list[OpRow]:
    if snapshot is None:
        return []
    stage = snapshot.stage_filter
    return [r for r in snapshot.torch.ops if stage is None or r.stage == stage]


def layout(width: int, with_shapes: bool) -> tuple[int, int]:
    """(name width, shapes width) for a table ``width`` cells wide."""
    fixed = sum(w + 1 for _, w, _ in COLUMNS)
    free = max(12, width - fixed - 1)
    if not with_shapes or free < 56:  # names matter more than shapes
        return free, 0
    name_w = max(36, free * 2 // 3)
    return name_w, max(0, free - name_w - 1)


def _cell(text: str, width: int, right: bool = False) -> str:
    if len(text) > width:
        text = text[: max(0, width - 1)] + "…"
    return text.rjust(width) if right else text.ljust(width)


def header_line(width: int, with_shapes: bool) -> str:
    name_w, shapes_w = layout(width, with_shapes)
    cells = [_cell("op / kernel", name_w)] + [_cell(t, w, r) for t, w, r in COLUMNS]
    text = " ".join(cells) + (" " + _cell("shapes", shapes_w) if shapes_w else "")
    return text.ljust(width)


def row_segments(row: OpRow, width: int, with_shapes: bool, base: Style) -> list[Segment]:
    name_w, shapes_w = layout(width, with_shapes)
    color = stage_color(row.stage)
    cuda = row.device != "cpu"
    values = (row.device, row.stage, f"{row.count:,}", f"{row.total_us / 1000:.2f}",
              f"{row.self_us / 1000:.2f}", f"{row.mean_us:.1f}")  # fmt: skip
    name = _cell(short_name(row.name, name_w), name_w)
    segs = [Segment(name + " ", base + Style(color=color, italic=cuda))]
    for (title, w, right), value in zip(COLUMNS, values):
        style = base + (Style(color=color) if title == "stage" else Style(bold=title == "self ms"))
        segs.append(Segment(_cell(value, w, right) + " ", style))
    if shapes_w:
        segs.append(Segment(_cell(row.shapes or "", shapes_w), base + Style(color="#8a8a8a")))
    return segs


class OpsTable(ScrollView, can_focus=True, inherit_bindings=False):
    """The table with a column header on the first line and a cursor over the rows."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "PgUp", show=False),
        Binding("pagedown", "page(1)", "PgDn", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.rows: list[OpRow] = []
        self.cursor = 0

    def show(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.rows = visible_rows(snapshot)
        self.cursor = min(self.cursor, max(0, len(self.rows) - 1))
        self.virtual_size = Size(self.size.width, len(self.rows) + 1)
        self.refresh()

    @property
    def with_shapes(self) -> bool:
        return any(r.shapes for r in self.rows)

    # -- moving ---------------------------------------------------------------------------------
    def _move_to(self, index: int) -> None:
        if not self.rows:
            return
        self.cursor = min(max(0, index), len(self.rows) - 1)
        height = self.scrollable_content_region.height - 1  # the header stays
        top = int(self.scroll_offset.y)
        if height > 0 and self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif height > 0 and self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True)
        self.refresh()

    def reveal(self, name: str) -> bool:
        """Put the cursor on the first (costliest) row of op or kernel ``name``."""
        for i, row in enumerate(self.rows):
            if row.name == name:
                self._move_to(i)
                return True
        return False

    def action_cursor(self, step: int) -> None:
        self._move_to(self.cursor + step)

    def action_page(self, direction: int) -> None:
        self._move_to(self.cursor + direction * max(1, self.scrollable_content_region.height - 2))

    def on_click(self, event: events.Click) -> None:
        if event.y > 0:
            self._move_to(int(self.scroll_offset.y) + event.y - 1)

    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.rows) + 1)

    # -- drawing --------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if not self.rows:
            if y != 0:
                return Strip.blank(width)
            reason = no_ops_reason(self.snapshot)
            stage = self.snapshot.stage_filter if self.snapshot else None
            text = reason or (f"no torch ops in stage {stage}" if stage else "no torch ops")
            return Strip([Segment(text, Style(dim=True, italic=True))]).adjust_cell_length(width)
        if y == 0:
            return Strip([Segment(header_line(width, self.with_shapes), HEADER_STYLE)])
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self.rows):
            return Strip.blank(width)
        selected = index == self.cursor
        base = (
            Style(bgcolor="#2a3850")
            if selected and self.has_focus
            else (Style(bgcolor="#303030") if selected else Style())
        )
        segs = row_segments(self.rows[index], width, self.with_shapes, base)
        return Strip(segs).crop(0, width).extend_cell_length(width, base)
