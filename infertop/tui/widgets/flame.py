"""The flame view: the session's call tree as an indented icicle list with zoom.

Each row is a frame: a bar (its share of the zoomed root), total %, self % (of every sample
shown, under the stage filter), then the function indented by depth, and file:line. The zoom
is a frame path, so it survives new snapshots; if the path disappears the view goes to the root.

The same list draws the torch-ops flame (``mode = "ops"``: ops → child ops → kernels, in µs,
from the agent's profiler windows). ``FlamePanel`` is the lower panel: the Python flame, the
torch-ops flame or the ops table (``VIEWS``), under one header line.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from infertop.analysis.flame import FlameNode
from infertop.analysis.ops import DEVICE_FILE
from infertop.analysis.snapshot import Snapshot
from infertop.model.events import Frame
from infertop.tui.palette import bar, stage_color
from infertop.tui.widgets.ops import OpsTable, no_ops_reason, short_name, visible_rows

MIN_SHARE = 0.005  # rows under 0.5 % of the zoomed root are left out
MAX_INDENT = 24
NUMBERS_W = 14  # " 45.2%  12.0% "
VIEWS = ("python", "ops", "table")  # what ``o`` cycles through
VIEW_TITLES = {"python": "flame", "ops": "torch ops", "table": "ops"}


@dataclass(frozen=True)
class FlameRow:
    node: FlameNode
    depth: int


def flame_rows(zoom: FlameNode, zoomed: bool, min_share: float = MIN_SHARE) -> list[FlameRow]:
    """Depth-first rows under ``zoom`` (itself included when zoomed), biggest children first."""
    if zoom.total <= 0:
        return []
    cutoff = zoom.total * min_share
    rows: list[FlameRow] = []
    start = [(zoom, 0)] if zoomed else [(c, 0) for c in zoom.sorted_children()]
    stack = [item for item in reversed(start) if item[0].total >= cutoff]
    while stack:
        node, depth = stack.pop()
        rows.append(FlameRow(node, depth))
        kids = [c for c in node.sorted_children() if c.total >= cutoff]
        stack.extend((c, depth + 1) for c in reversed(kids))
    return rows


def breadcrumb(path: list[Frame], width: int) -> str:
    """``all › a › b``, dropping the outermost names (``…``) to fit ``width``."""
    names = [f.function for f in path]
    dropped = False
    while True:
        text = " › ".join(["all"] + (["…"] if dropped else []) + names)
        if len(text) <= width or len(names) <= 1:
            return text if len(text) <= width else text[: max(1, width - 1)] + "…"
        names, dropped = names[1:], True


class FlameList(ScrollView, can_focus=True, inherit_bindings=False):
    """The scrolling list of frames with a cursor; enter zooms in, escape zooms out."""

    BINDINGS = [
        Binding(
            "up", "cursor(-1)", "Up", show=False, tooltip="flame: previous frame", key_display="↑"
        ),
        Binding(
            "down", "cursor(1)", "Down", show=False, tooltip="flame: next frame", key_display="↓"
        ),
        Binding(
            "pageup", "page(-1)", "PgUp", show=False, tooltip="flame: page up", key_display="pgup"
        ),
        Binding(
            "pagedown",
            "page(1)",
            "PgDn",
            show=False,
            tooltip="flame: page down",
            key_display="pgdn",
        ),
        Binding("enter", "zoom_in", "Zoom", tooltip="flame: zoom into the selected frame"),
        Binding(
            "escape,backspace",
            "zoom_out",
            "Out",
            key_display="esc",
            tooltip="flame: zoom out one level",
        ),
    ]

    class ZoomChanged(Message):
        """The zoom path or the data changed: the panel redraws its header."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.mode = "python"  # or "ops": the torch-ops flame
        self.zoom: list[Frame] = []
        self.rows: list[FlameRow] = []
        self.cursor = 0
        self._cursor_path: list[Frame] | None = None
        self.zoom_node: FlameNode | None = None
        self._saved: dict[str, tuple[list[Frame], list[Frame] | None]] = {}

    # -- data -------------------------------------------------------------------------------
    def show(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._rebuild()

    def set_mode(self, mode: str) -> None:
        """Switch between the Python and the torch-ops flame; each keeps its own zoom."""
        if mode == self.mode:
            return
        self._saved[self.mode] = (self.zoom, self._cursor_path)
        self.mode = mode
        self.zoom, self._cursor_path = self._saved.get(mode, ([], None))
        self.cursor = 0
        self.scroll_to(y=0, animate=False, immediate=True)
        self._rebuild()

    @property
    def root(self) -> FlameNode | None:
        if self.snapshot is None:
            return None
        return self.snapshot.device_flame if self.mode == "ops" else self.snapshot.flame

    @property
    def selected(self) -> FlameNode | None:
        return self.rows[self.cursor].node if 0 <= self.cursor < len(self.rows) else None

    def _rebuild(self) -> None:
        root = self.root
        if root is None:
            self.rows, self.zoom_node = [], None
        else:
            node = root.find(self.zoom) if self.zoom else root
            if node is None:  # the zoomed frame is gone (a new stage filter, a seek): go home
                self.zoom, node = [], root
            self.zoom_node = node
            self.rows = flame_rows(node, zoomed=bool(self.zoom))
        self.cursor = self._index_of(self._cursor_path)
        self.virtual_size = Size(self.size.width, max(1, len(self.rows)))
        self._keep_cursor_visible()
        self.refresh()
        self.post_message(self.ZoomChanged())

    def _index_of(self, path: list[Frame] | None) -> int:
        if path is not None:
            for i, row in enumerate(self.rows):
                if row.node.path() == path:
                    return i
        return min(self.cursor, max(0, len(self.rows) - 1))

    # -- actions ------------------------------------------------------------------------------
    def _move_to(self, index: int) -> None:
        if not self.rows:
            return
        self.cursor = min(max(0, index), len(self.rows) - 1)
        self._cursor_path = self.rows[self.cursor].node.path()
        self._keep_cursor_visible()
        self.refresh()

    def action_cursor(self, step: int) -> None:
        self._move_to(self.cursor + step)

    def action_page(self, direction: int) -> None:
        self._move_to(self.cursor + direction * max(1, self.scrollable_content_region.height - 1))

    def action_zoom_in(self) -> None:
        node = self.selected
        if node is None or node.frame is None:
            return
        self.zoom = node.path()
        self._cursor_path = self.zoom
        self._rebuild()

    def action_zoom_out(self) -> None:
        if not self.zoom:
            return
        self._cursor_path = self.zoom
        self.zoom = self.zoom[:-1]
        self._rebuild()

    def on_click(self, event: events.Click) -> None:
        self._move_to(int(self.scroll_offset.y) + event.y)

    def reveal(self, frame: Frame) -> bool:
        """Put the cursor on ``frame`` where it weighs most (zooming to its caller if it is
        too small to list at the top); False when the view does not hold it."""
        root = self.root
        best: FlameNode | None = None
        stack = [root] if root is not None else []
        while stack:
            node = stack.pop()
            if node.frame == frame and (best is None or node.total > best.total):
                best = node
            stack.extend(node.children.values())
        if best is None:
            return False
        path = best.path()
        self.zoom, self._cursor_path = [], path
        self._rebuild()
        if self.selected is not best:
            self.zoom = path[:-1]
            self._rebuild()
        return True

    def _keep_cursor_visible(self) -> None:
        height = self.scrollable_content_region.height
        if height <= 0:
            return
        top = int(self.scroll_offset.y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True)

    # -- drawing ------------------------------------------------------------------------------
    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, max(1, len(self.rows)))

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        index = int(self.scroll_offset.y) + y
        if not self.rows:
            if y != 0:
                return Strip.blank(width)
            text = self.empty_text()
            return Strip([Segment(text, Style(dim=True, italic=True))]).adjust_cell_length(width)
        if index >= len(self.rows):
            return Strip.blank(width)
        return self._render_row(self.rows[index], index == self.cursor, width)

    def empty_text(self) -> str:
        """The one line shown when there are no rows."""
        snap = self.snapshot
        if self.mode == "ops":
            reason = no_ops_reason(snap)
            if reason is not None:
                return reason
            stage = snap.stage_filter if snap is not None else None
            return f"no torch ops in stage {stage}" if stage else "no torch ops"
        if self.root is None or snap is None or snap.samples == 0:
            return "waiting for samples…"
        if snap.stage_filter:
            return f"no samples in stage {snap.stage_filter}"
        return "no Python stacks yet"

    def _render_row(self, row: FlameRow, selected: bool, width: int) -> Strip:
        node, root, zoom = row.node, self.root, self.zoom_node
        assert root is not None and zoom is not None and node.frame is not None
        color = stage_color(node.stage)
        base = (
            Style(bgcolor="#2a3850")
            if selected and self.has_focus
            else (Style(bgcolor="#303030") if selected else Style())
        )
        bar_w = 10 if width >= 70 else 6
        filled, empty = bar(node.total / zoom.total if zoom.total else 0.0, bar_w)
        total_pct = node.total / root.total * 100 if root.total else 0.0
        self_pct = node.self_count / root.total * 100 if root.total else 0.0
        indent = "·" * row.depth if row.depth <= MAX_INDENT else "…" + "·" * (MAX_INDENT - 1)
        frame = node.frame
        numbers = f"{total_pct:6.1f}%{self_pct:6.1f}%  "
        if self.mode == "ops":  # µs: the time and the device go before the (long) name
            device = frame.file == DEVICE_FILE
            numbers += f"{node.total / 1000:9.2f} ms {'gpu' if device else 'cpu'}  "
            room = width - len(filled) - len(empty) - len(numbers) - len(indent)
            name, where = short_name(frame.function, max(8, room)), ""
        else:
            device, name = False, frame.function
            where = f"  {frame.short_file}:{frame.line}" if frame.line else f"  {frame.short_file}"
        segments = [
            Segment(filled, base + Style(color=color)),
            Segment(empty, base + Style(bgcolor="#262626" if not selected else None)),
            Segment(numbers, base + Style(bold=selected)),
            Segment(indent, base + Style(color="#4e4e4e")),
            Segment(name, base + Style(color=color, bold=not device, italic=device)),
            Segment(where, base + Style(color="#8a8a8a")),
        ]
        return Strip(segments).crop(0, width).extend_cell_length(width, base)


class FlamePanel(Vertical):
    """The lower panel under a header bar: the Python flame, the torch-ops flame or the ops
    table (``view``), with the stage filter and, for the flames, the zoom breadcrumb."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view = "python"

    def compose(self) -> ComposeResult:
        yield Static(id="flame-header")
        yield FlameList(id="flame-list")
        yield OpsTable(id="ops-table")

    def on_mount(self) -> None:
        self.ops_table.display = False
        self._update_header()

    @property
    def flame_list(self) -> FlameList:
        return self.query_one(FlameList)

    @property
    def ops_table(self) -> OpsTable:
        return self.query_one(OpsTable)

    def show(self, snapshot: Snapshot) -> None:
        self.flame_list.show(snapshot)
        self.ops_table.show(snapshot)
        self._update_header()

    def set_view(self, view: str) -> None:
        """Show ``view`` (one of ``VIEWS``) and give it the focus."""
        self.view = view
        table = view == "table"
        self.flame_list.display = not table
        self.ops_table.display = table
        if not table:
            self.flame_list.set_mode(view)
        (self.ops_table if table else self.flame_list).focus()
        self._update_header()

    def on_flame_list_zoom_changed(self, event: FlameList.ZoomChanged) -> None:
        event.stop()
        self._update_header()

    def on_resize(self) -> None:
        self._update_header()

    def header_text(self, width: int) -> str:
        """``Python  ·  stage: all  ·  path: all › main › forward (12.3%)``, fitted to
        ``width``; the first words say which view this is."""
        flame = self.flame_list
        snap = flame.snapshot
        stage = f"stage: {snap.stage_filter if snap and snap.stage_filter else 'all'}"
        if self.view == "table":
            parts = ["ops table by self time", stage, f"{len(visible_rows(snap))} rows"]
            if snap is not None and snap.op_windows:
                parts.append(f"{snap.op_windows} windows, {snap.op_seconds:.1f} s profiled")
            text = "  ·  ".join(parts)
            return text if len(text) <= width else text[: max(1, width - 1)] + "…"
        if self.view == "ops":
            head = "torch ops, µs (op CPU + kernel GPU)  ·  "
            head = head if len(head) + 40 <= width else "torch ops µs  ·  "
        else:
            head = "Python  ·  "
        head += f"{stage}  ·  path: "
        zoom, root = flame.zoom_node, flame.root
        share = ""
        if flame.zoom and zoom is not None and root is not None and root.total:
            share = f" ({zoom.total / root.total * 100:.1f}%)"
        crumb = breadcrumb(flame.zoom, max(8, width - len(head) - len(share)))
        return head + crumb + share

    def _update_header(self) -> None:
        snap = self.flame_list.snapshot
        width = max(20, self.content_region.width - 2)
        self.query_one("#flame-header", Static).update(Text(" " + self.header_text(width)))
        self.set_class(snap is not None and snap.stage_filter is not None, "-filtered")
