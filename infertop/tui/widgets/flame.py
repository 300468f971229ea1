"""The flame panel: the session's call tree as an icicle graph (the default) or as an
indented list (key ``t``), with zoom, a selected frame and search.

``FlameList`` is the widget: both styles share the zoom and the selection, each a frame path,
so they survive new snapshots and a switch of style. The icicle's layout is
``infertop.tui.icicle`` (pure) and its rows are drawn by ``widgets/icicle.py``; the list's rows,
the breadcrumb and the detail line are ``widgets/flame_rows.py``; matching and the share of a
search are ``infertop.tui.flame_search``. The same widget draws the torch-ops flame
(``mode = "ops"``: ops → child ops → kernels, in µs, from the agent's profiler windows).
Its keys are ``widgets/flame_keys.py``. ``FlamePanel`` (``widgets/flame_panel.py``) is the lower
panel: the Python flame, the torch-ops flame or the ops table (``VIEWS``) under one header line,
and under a flame the selected frame's detail line (or the search line).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from infertop.analysis.flame import FlameNode
from infertop.analysis.flame_diff import BaseShares, path_key
from infertop.analysis.snapshot import Snapshot
from infertop.model.events import Frame
from infertop.tui import flame_search
from infertop.tui.flame_search import Finisher, Search, search
from infertop.tui.icicle import IcicleLayout, deepest_shown
from infertop.tui.palette import diff_color
from infertop.tui.widgets.flame_keys import FLAME_BINDINGS
from infertop.tui.widgets.flame_rows import (
    MIN_SHARE,
    FlameRow,
    breadcrumb,
    flame_rows,
    list_strip,
    ops_label,
)
from infertop.tui.widgets.icicle import by_stage, icicle_strip, python_label
from infertop.tui.widgets.ops import no_ops_reason

__all__ = [  # the list's pieces are re-exported from flame_rows, where they live
    "MIN_SHARE",
    "STYLES",
    "VIEWS",
    "VIEW_TITLES",
    "FlameList",
    "FlameRow",
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

    BINDINGS = FLAME_BINDINGS

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
