"""The flame panel: the session's call tree as an icicle graph (the default) or as an
indented list (key ``t``), with zoom, a selected frame and search.

``FlameList`` is the widget: both styles share the zoom and the selection, each a frame path,
so they survive new snapshots and a switch of style. The icicle's layout is
``infertop.tui.icicle`` (pure) and its rows are drawn by ``widgets/icicle.py``; the list's rows,
the breadcrumb and the detail line are ``widgets/flame_rows.py``; matching and the share of a
search are ``infertop.tui.flame_search``. The same widget draws the torch-ops flame
(``mode = "ops"``: ops → child ops → kernels, in µs, from the agent's profiler windows).
``FlamePanel`` is the lower panel: the Python flame, the torch-ops flame or the ops table
(``VIEWS``) under one header line, and under a flame the selected frame's detail line (or the
search line).
"""

from __future__ import annotations

import os
from collections.abc import Callable

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
from textual.widgets import Input, Static

from infertop.analysis.flame import FlameNode
from infertop.analysis.flame_diff import BaseShares, path_key
from infertop.analysis.snapshot import Snapshot
from infertop.model.events import Frame
from infertop.tui import flame_search
from infertop.tui.flame_search import Finisher, Search, search, search_text
from infertop.tui.icicle import IcicleLayout, deepest_shown
from infertop.tui.palette import diff_color
from infertop.tui.widgets.flame_rows import (
    MIN_SHARE,
    FlameRow,
    breadcrumb,
    flame_rows,
    frame_detail,
    list_strip,
    ops_label,
)
from infertop.tui.widgets.icicle import by_stage, icicle_strip, python_label
from infertop.tui.widgets.ops import OpsTable, no_ops_reason, visible_rows

__all__ = [  # the list's pieces are re-exported from flame_rows, where they live
    "MIN_SHARE",
    "STYLES",
    "VIEWS",
    "VIEW_TITLES",
    "FlameList",
    "FlamePanel",
    "FlameRow",
    "SearchInput",
    "breadcrumb",
    "flame_rows",
]

VIEWS = ("python", "ops", "table")  # what ``o`` cycles through
VIEW_TITLES = {"python": "flame", "ops": "torch ops", "table": "ops"}
STYLES = ("icicle", "list")  # how a flame is drawn (key t)


class FlameList(ScrollView, can_focus=True, inherit_bindings=False):
    """The flame, drawn as an icicle graph (``style = "icicle"``) or an indented list
    (``"list"``, key ``t``); both share the zoom and the selection, each a frame path, so a
    new snapshot or a switch of style keeps the place. A selected frame that is gone (or too
    narrow to draw) falls back to its nearest ancestor on screen; a zoom that is gone, to the
    root."""

    BINDINGS = [
        Binding(
            "up",
            "up",
            "Up",
            show=False,
            tooltip="flame: the caller (icicle) · the row above (list)",
            key_display="↑",
        ),
        Binding(
            "down",
            "down",
            "Down",
            show=False,
            tooltip="flame: a callee — the one you came up from, else the widest (icicle) · "
            "the row below (list)",
            key_display="↓",
        ),
        Binding(
            "left",
            "side(-1)",
            "Left",
            show=False,
            tooltip="flame: the frame to the left on the same row (icicle) · the caller (list)",
            key_display="←",
        ),
        Binding(
            "right",
            "side(1)",
            "Right",
            show=False,
            tooltip="flame: the frame to the right on the same row (icicle) · the widest "
            "callee (list)",
            key_display="→",
        ),
        Binding(
            "pageup",
            "page(-1)",
            "PgUp",
            show=False,
            tooltip="flame: a page up (list) · as many callers up (icicle)",
            key_display="pgup",
        ),
        Binding(
            "pagedown",
            "page(1)",
            "PgDn",
            show=False,
            tooltip="flame: a page down (list) · as many callees down (icicle)",
            key_display="pgdn",
        ),
        Binding(
            "enter",
            "zoom_in",
            "Zoom",
            tooltip="flame: zoom into the selected frame (it becomes the root); a click "
            "selects a frame, a second click zooms",
        ),
        Binding(
            "escape",
            "escape",
            "Out",
            key_display="esc",
            tooltip="flame: clear the search highlight, else zoom out one level",
        ),
        Binding("backspace", "zoom_out", "Out", show=False, tooltip="flame: zoom out one level"),
        Binding(
            "t",
            "toggle_style",
            "Tree",
            show=False,
            tooltip="flame: icicle graph ↔ indented list (the zoom and the selection stay)",
        ),
        Binding(
            "slash",
            "search",
            "Find",
            show=False,
            key_display="/",
            tooltip="flame: search frames by function or file, a substring or a glob "
            "(tokeniz*): matches are highlighted and the header gives their share; enter "
            "keeps the highlight, esc clears it",
        ),
    ]

    class Changed(Message):
        """The zoom, the selection, the search or the data changed: the panel redraws its
        header and detail line."""

    class Counted(Message, bubble=False):
        """A search too big to count at once has been counted (on a thread)."""

        def __init__(self, found: Search) -> None:
            super().__init__()
            self.found = found

    class SearchRequested(Message):
        """``/``: the panel opens its search line."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.mode = "python"  # or "ops": the torch-ops flame
        self.style = STYLES[0]  # "icicle" or "list"
        self.zoom: list[Frame] = []
        self.selected_path: list[Frame] | None = None  # what was picked (maybe not on screen)
        self._trail: list[Frame] = []  # the deepest path visited: where down goes back to
        self._saved: dict[str, tuple[list[Frame], list[Frame] | None, list[Frame]]] = {}
        self.zoom_node: FlameNode | None = None
        self.rows: list[FlameRow] = []  # the list style's rows
        self._row_index: dict[int, int] = {}  # id(node) -> its row
        self.graph: IcicleLayout | None = None  # the icicle style's spans
        self.cursor = 0  # the selected row of the list
        self._selected: FlameNode | None = None
        self.pattern = ""
        self.found: Search | None = None
        self._finisher = Finisher(self._counted_elsewhere)
        self._strips: dict[int, Strip] = {}
        self._growth: dict[int, str] = {}  # id(node) -> its diff colour, for the nodes of ...
        self._growth_root: FlameNode | None = None  # ... this root (a new snapshot: new nodes)
        self._own: BaseShares | None = None  # the shares of this root, matched as the base's

    # -- data -------------------------------------------------------------------------------
    def show(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._rebuild()

    def set_mode(self, mode: str) -> None:
        """Switch between the Python and the torch-ops flame; each keeps its own zoom."""
        if mode == self.mode:
            return
        self._saved[self.mode] = (self.zoom, self.selected_path, self._trail)
        self.mode = mode
        self.zoom, self.selected_path, self._trail = self._saved.get(mode, ([], None, []))
        self.scroll_to(y=0, animate=False, immediate=True)
        self._rebuild()

    def set_style(self, style: str) -> None:
        if style != self.style:
            self.style = style
            self._rebuild()

    def set_search(self, pattern: str) -> None:
        """Highlight the frames matching ``pattern`` ("" clears)."""
        self.pattern = pattern.strip()
        self._search()
        self._changed()

    def _search(self) -> None:
        """The search over the current tree; one too big to count at once is finished on a
        thread, and the header follows when it is done."""
        root = self.root
        if root is None or not self.pattern:
            self.found = None
        else:
            self.found = search(root, self.pattern, budget=flame_search.SYNC_NODES)
        if self.found is not None and not self.found.done:
            self._finisher.submit(self.found)

    def _counted_elsewhere(self, found: Search) -> None:  # on the finisher's thread
        self.post_message(self.Counted(found))  # thread-safe, and it does not wait

    def on_flame_list_counted(self, event: Counted) -> None:
        if event.found is self.found:
            self.post_message(self.Changed())

    @property
    def root(self) -> FlameNode | None:
        if self.snapshot is None:
            return None
        return self.snapshot.torch.device_flame if self.mode == "ops" else self.snapshot.flame

    @property
    def selected(self) -> FlameNode | None:
        return self._selected

    @property
    def icicle(self) -> bool:
        return self.style == "icicle"

    def _content_width(self) -> int:
        return self.scrollable_content_region.width

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
        self._row_index = {id(r.node): i for i, r in enumerate(self.rows)}
        self._search()
        self._lay_out()
        self._changed()

    def _lay_out(self) -> None:
        """The icicle's spans for the current width, then the selection placed on them."""
        node = self.zoom_node
        if node is None:
            self.graph = None
        else:
            self.graph = IcicleLayout(node, bool(self.zoom), self._content_width())
        lines = self.graph.depth if self.icicle and self.graph else len(self.rows)
        self.virtual_size = Size(self.size.width, max(1, lines))
        self._resolve()

    def _shown(self, node: FlameNode) -> bool:
        if self.icicle:
            return self.graph is not None and self.graph.drawn(node)
        return id(node) in self._row_index

    def _resolve(self) -> None:
        """Put the selection on the picked path, or its nearest ancestor on screen, or else
        the first frame."""
        root, node = self.root, None
        if root is not None and self.selected_path:
            node = deepest_shown(root, self.selected_path, self._shown)
        if node is None:
            if self.icicle:
                node = self.graph.first() if self.graph is not None else None
            else:
                node = self.rows[0].node if self.rows else None
        self._selected = node
        self.cursor = self._row_index.get(id(node), 0) if node is not None else 0
        self._keep_selection_visible()

    def _changed(self) -> None:
        self._strips.clear()
        self.refresh()
        self.post_message(self.Changed())

    def _select(self, node: FlameNode | None) -> None:
        if node is None or node is self._selected:
            return
        path = node.path()
        if self._trail[: len(path)] != path:
            self._trail = path
        self.selected_path = path
        self._selected = node
        self.cursor = self._row_index.get(id(node), self.cursor)
        self._keep_selection_visible()
        self._changed()

    # -- actions ------------------------------------------------------------------------------
    def action_up(self) -> None:
        node = self._selected
        if self.icicle:
            if node is not None and self.graph is not None:
                self._select(self.graph.parent(node))
        elif self.rows:
            self._select(self.rows[max(0, self.cursor - 1)].node)

    def action_down(self) -> None:
        node = self._selected
        if self.icicle:
            if node is not None and self.graph is not None:
                path = node.path()
                deeper = len(self._trail) > len(path) and self._trail[: len(path)] == path
                prefer = self._trail[len(path)] if deeper else None
                self._select(self.graph.child(node, prefer))
        elif self.rows:
            self._select(self.rows[min(len(self.rows) - 1, self.cursor + 1)].node)

    def action_side(self, step: int) -> None:
        node = self._selected
        if node is None:
            return
        if self.icicle:
            if self.graph is not None:
                self._select(self.graph.neighbour(node, step))
        elif step < 0:
            if node.parent is not None and id(node.parent) in self._row_index:
                self._select(node.parent)
        else:
            below = self.cursor + 1
            if below < len(self.rows) and self.rows[below].node.parent is node:
                self._select(self.rows[below].node)

    def action_page(self, direction: int) -> None:
        page = max(1, self.scrollable_content_region.height - 1)
        if self.icicle:
            for _ in range(page):
                before = self._selected
                self.action_down() if direction > 0 else self.action_up()
                if self._selected is before:
                    break
        elif self.rows:
            index = min(max(0, self.cursor + direction * page), len(self.rows) - 1)
            self._select(self.rows[index].node)

    def action_zoom_in(self) -> None:
        node = self._selected
        if node is None or node.frame is None or node is self.zoom_node:
            return
        self.zoom = node.path()
        self.selected_path = self.zoom
        self._rebuild()

    def action_zoom_out(self) -> None:
        if not self.zoom:
            return
        self.selected_path = self.zoom
        self.zoom = self.zoom[:-1]
        self._rebuild()

    def action_escape(self) -> None:
        if self.pattern:
            self.set_search("")
        else:
            self.action_zoom_out()

    def action_toggle_style(self) -> None:
        self.set_style("list" if self.icicle else "icicle")

    def action_search(self) -> None:
        self.post_message(self.SearchRequested())

    def on_click(self, event: events.Click) -> None:
        y = int(self.scroll_offset.y) + event.y
        if self.icicle:
            node = self.graph.at(y, event.x) if self.graph is not None else None
        else:
            node = self.rows[y].node if 0 <= y < len(self.rows) else None
        if node is None:
            return
        if node is self._selected:
            self.action_zoom_in()  # a second click on a frame zooms into it
        else:
            self._select(node)

    def reveal(self, frame: Frame) -> bool:
        """Select ``frame`` where it weighs most (zooming to its caller if it is too small
        to show at the top); False when the view does not hold it."""
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
        self.zoom, self.selected_path, self._trail = [], path, path
        self._rebuild()
        if self.selected is not best:
            self.zoom = path[:-1]
            self._rebuild()
        return True

    def _keep_selection_visible(self) -> None:
        height = self.scrollable_content_region.height
        node = self._selected
        if height <= 0 or node is None:
            return
        if self.icicle:
            line = self.graph.row_of(node) if self.graph is not None else None
        else:
            line = self.cursor
        if line is None:
            return
        top = int(self.scroll_offset.y)
        if line < top:
            self.scroll_to(y=line, animate=False, immediate=True)
        elif line >= top + height:
            self.scroll_to(y=line - height + 1, animate=False, immediate=True)

    # -- drawing ------------------------------------------------------------------------------
    def on_resize(self) -> None:
        self._lay_out()
        self._changed()

    def on_focus(self) -> None:
        self._strips.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._strips.clear()
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self._content_width()
        if self.graph is not None and self.graph.width != width:
            self._lay_out()  # a scrollbar came or went: lay out again for the new width
            self._strips.clear()
            self.post_message(self.Changed())
        index = int(self.scroll_offset.y) + y
        lines = self.graph.depth if self.icicle and self.graph is not None else len(self.rows)
        if not lines:
            if y != 0:
                return Strip.blank(width)
            text = self.empty_text()
            return Strip([Segment(text, Style(dim=True, italic=True))]).adjust_cell_length(width)
        if index >= lines:
            return Strip.blank(width)
        strip = self._strips.get(index)
        if strip is None:
            strip = self._strips[index] = self._render_index(index, width)
        return strip

    def _render_index(self, index: int, width: int) -> Strip:
        root = self.root
        if self.icicle:
            assert self.graph is not None and root is not None
            return icicle_strip(
                self.graph.rows[index],
                width,
                total=root.total,
                selected=self._selected,
                focused=self.has_focus,
                found=self.found,
                label=ops_label if self.mode == "ops" else python_label,
                colour=self._colour() or by_stage,
            )
        assert root is not None and self.zoom_node is not None
        return list_strip(
            self.rows[index],
            width,
            root=root,
            zoom=self.zoom_node,
            selected=index == self.cursor,
            focused=self.has_focus,
            found=self.found,
            ops=self.mode == "ops",
            colour=self._colour(),
        )

    @property
    def base(self) -> BaseShares | None:
        """replay --base: the base's shares, for the Python flame (the ops flame has none)."""
        snap = self.snapshot
        return snap.ui.base if snap is not None and self.mode == "python" else None

    @property
    def own_shares(self) -> BaseShares | None:
        """With a base: the shown tree's share of each call path, lines merged as the base is
        matched (a function called from two lines of its caller is one path there)."""
        root = self.root
        if self.base is None or root is None:
            return None
        if self._growth_root is not root:
            self._growth.clear()
            self._growth_root, self._own = root, BaseShares(root)
        return self._own

    def _colour(self) -> Callable[[FlameNode], str] | None:
        """The differential flame's colouring (grew red, shrank blue) when there is a base: by
        the change of the frame's call path, lines merged, as ``diff --flame`` counts it."""
        base, own = self.base, self.own_shares
        if base is None or own is None:
            return None
        cache = self._growth

        def colour(node: FlameNode) -> str:
            key = id(node)
            if key not in cache:
                path = path_key(node)
                cache[key] = diff_color(own.share(path) - base.share(path))
            return cache[key]

        return colour

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


class SearchInput(Input):
    """The flame's one-line search (``/``): enter keeps the highlight, esc clears it."""

    BINDINGS = [Binding("escape", "cancel", "Clear", show=False)]

    class Cancelled(Message):
        """Esc: the search is cleared."""

    def action_cancel(self) -> None:
        self.post_message(self.Cancelled())


class FlamePanel(Vertical):
    """The lower panel under a header bar: the Python flame, the torch-ops flame or the ops
    table (``view``), with the stage filter and, for the flames, the style, the zoom
    breadcrumb and a search's share; under a flame, the selected frame's detail line (or the
    search line while a search is typed)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view = "python"

    def compose(self) -> ComposeResult:
        yield Static(id="flame-header")
        yield FlameList(id="flame-list")
        yield OpsTable(id="ops-table")
        yield Static(id="flame-detail")
        yield SearchInput(
            placeholder="search: function or file, substring or glob (tokeniz*) · "
            "enter keeps · esc clears",
            id="flame-search",
            compact=True,
        )

    def on_mount(self) -> None:
        self.ops_table.display = False
        self.search_input.display = False
        self._update_header()

    @property
    def flame_list(self) -> FlameList:
        return self.query_one(FlameList)

    @property
    def ops_table(self) -> OpsTable:
        return self.query_one(OpsTable)

    @property
    def search_input(self) -> SearchInput:
        return self.query_one(SearchInput)

    @property
    def detail(self) -> Static:
        return self.query_one("#flame-detail", Static)

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
        self.detail.display = not table
        self.search_input.display = False
        if not table:
            self.flame_list.set_mode(view)
        (self.ops_table if table else self.flame_list).focus()
        self._update_header()

    # -- search ------------------------------------------------------------------------------
    def on_flame_list_search_requested(self, event: FlameList.SearchRequested) -> None:
        event.stop()
        box = self.search_input
        box.value = self.flame_list.pattern
        self.detail.display = False
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        if self.search_input.display:
            self.flame_list.set_search(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._close_search(event.value)

    def on_search_input_cancelled(self, event: SearchInput.Cancelled) -> None:
        event.stop()
        self._close_search("")

    def _close_search(self, pattern: str) -> None:
        self.flame_list.set_search(pattern)
        self.search_input.display = False
        self.detail.display = self.view != "table"
        self.flame_list.focus()

    # -- header and detail -------------------------------------------------------------------
    def on_flame_list_changed(self, event: FlameList.Changed) -> None:
        event.stop()
        self._update_header()

    def on_resize(self) -> None:
        self._update_header()

    def header_text(self, width: int) -> str:
        """``Python icicle  ·  stage: all  ·  path: all › main › forward (12.3%)``, then a
        search's share (``  ·  /tokeniz*: 26.1 %``), fitted to ``width``; the first words
        say which view this is, and how it is drawn."""
        flame = self.flame_list
        snap = flame.snapshot
        stage = f"stage: {snap.stage_filter if snap and snap.stage_filter else 'all'}"
        if self.view == "table":
            parts = ["ops table by self time", stage, f"{len(visible_rows(snap))} rows"]
            if snap is not None and snap.torch.windows:
                parts.append(f"{snap.torch.windows} windows, {snap.torch.seconds:.1f} s profiled")
            text = "  ·  ".join(parts)
            return text if len(text) <= width else text[: max(1, width - 1)] + "…"
        if self.view == "ops":
            head = f"torch ops {flame.style}, µs (op CPU + kernel GPU)  ·  "
            head = head if len(head) + 40 <= width else f"torch ops {flame.style} µs  ·  "
        else:
            head = f"Python {flame.style}  ·  "
            if flame.base is not None and snap is not None and snap.ui.base_path:
                head += f"vs base {os.path.basename(snap.ui.base_path)} (red grew, blue shrank)  ·  "
        head += f"{stage}  ·  path: "
        zoom, root = flame.zoom_node, flame.root
        share = ""
        if flame.zoom and zoom is not None and root is not None and root.total:
            share = f" ({zoom.total / root.total * 100:.1f}%)"
        found = search_text(flame.found)
        found = "  ·  /" + found if found else ""
        crumb = breadcrumb(flame.zoom, max(8, width - len(head) - len(share) - len(found)))
        return head + crumb + share + found

    def _update_header(self) -> None:
        snap = self.flame_list.snapshot
        width = max(20, self.content_region.width - 2)
        self.query_one("#flame-header", Static).update(Text(" " + self.header_text(width)))
        if self.view != "table":
            flame = self.flame_list
            zoom = flame.zoom_node if flame.zoom else None
            detail = frame_detail(
                flame.selected, flame.root, zoom, flame.mode == "ops", width, flame.base,
                own=flame.own_shares,
            )  # fmt: skip
            self.detail.update(detail)
        self.set_class(snap is not None and snap.stage_filter is not None, "-filtered")
