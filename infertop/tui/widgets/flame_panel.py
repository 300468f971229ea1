"""The lower panel: the Python flame, the torch-ops flame or the ops table (``VIEWS``) under one
header line, and under a flame the selected frame's detail line (or the search line).
"""

from __future__ import annotations

import os
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Static

from infertop.analysis.snapshot import Snapshot
from infertop.tui.flame_search import search_text
from infertop.tui.widgets.flame import FlameList
from infertop.tui.widgets.flame_rows import breadcrumb, frame_detail
from infertop.tui.widgets.ops import OpsTable, visible_rows
from infertop.words import plural

__all__ = ["FlamePanel", "SearchInput"]


class SearchInput(Input):
    """The flame's one-line search (``/``): enter keeps the highlight, esc clears it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Clear", show=False)]

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
            rows = len(visible_rows(snap))
            parts = ["ops table by self time", stage, f"{rows} {plural(rows, 'row')}"]
            if snap is not None and snap.torch.windows:
                n = snap.torch.windows
                parts.append(f"{n} {plural(n, 'window')}, {snap.torch.seconds:.1f} s profiled")
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
