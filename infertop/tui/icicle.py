"""The icicle graph's geometry, without Textual: which frame is drawn where for a given width.

The root is on top, one row per depth; each frame is a span of cells whose width is its share
of the shown root (the zoomed frame, or every sample), its children side by side under it.
Siblings go in a fixed order (function name, then file and line: FlameGraph's rule), so a new
snapshot with slightly different counts moves edges by a cell at most and never reorders
bars. A frame narrower than one cell is not drawn: a run of such siblings becomes one filler
span (``node`` None) when together they fill a cell, and their children are not laid out.

Positions are exact fractions of the width from the top down (a child starts where its parent
starts plus its elder siblings' share), rounded to cells only at the end, so the cells of a
child always lie within its parent's cells and rounding errors do not pile up with depth.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from infertop.analysis.flame import FlameNode
from infertop.model.events import Frame


@dataclass(frozen=True, slots=True)
class Span:
    """Cells ``x`` .. ``x + width - 1`` of one row: a frame, or (``node`` None) a filler of
    frames too narrow to draw."""

    node: FlameNode | None
    x: int
    width: int

    @property
    def end(self) -> int:
        return self.x + self.width


def sibling_key(node: FlameNode) -> tuple[str, str, str, int]:
    """Siblings' order: alphabetical by function (case-folded, then as written), file, line."""
    f = node.frame
    if f is None:
        return ("", "", "", 0)
    return (f.function.casefold(), f.function, f.file, f.line)


def ordered_children(node: FlameNode) -> list[FlameNode]:
    return sorted(node.children.values(), key=sibling_key)


def _cell(x: float) -> int:
    return math.floor(x + 0.5)  # monotonic rounding: nested intervals stay nested


class IcicleLayout:
    """The spans of every row for one tree, zoom and width. Built once (per snapshot, zoom or
    width); drawing and the keys only look things up in it."""

    def __init__(self, top: FlameNode, zoomed: bool, width: int) -> None:
        self.top = top
        self.zoomed = zoomed
        self.width = max(0, width)
        self.rows: list[list[Span]] = []
        self._where: dict[int, tuple[int, int]] = {}  # id(node) -> (row, index in the row)
        if top.total > 0 and self.width > 0:
            self._lay_out()

    def _lay_out(self) -> None:
        scale = self.width / self.top.total
        row = 0
        if self.zoomed:
            self.rows.append([])
            self._add(0, Span(self.top, 0, self.width))
            row = 1
        level = [(self.top, 0.0)]
        while level:
            self.rows.append([])
            below: list[tuple[FlameNode, float]] = []
            for node, start in level:
                self._children(row, node, start, scale, below)
            if not self.rows[row]:
                self.rows.pop()
            level, row = below, row + 1

    def _children(
        self,
        row: int,
        node: FlameNode,
        start: float,
        scale: float,
        below: list[tuple[FlameNode, float]],
    ) -> None:
        """Lay out ``node``'s children on ``row`` from exact position ``start``; the drawn
        ones go on ``below`` (with their exact start), for the next row."""
        at = start
        run: float | None = None  # exact start of a run of too-narrow siblings
        for child in ordered_children(node):
            w = child.total * scale
            if w < 1.0:
                if run is None:
                    run = at
            else:
                if run is not None:
                    self._filler(row, run, at)
                    run = None
                x = _cell(at)
                self._add(row, Span(child, x, _cell(at + w) - x))
                below.append((child, at))
            at += w
        if run is not None:
            self._filler(row, run, at)

    def _filler(self, row: int, start: float, end: float) -> None:
        x, e = _cell(start), _cell(end)
        if e > x:
            self.rows[row].append(Span(None, x, e - x))

    def _add(self, row: int, span: Span) -> None:
        self._where[id(span.node)] = (row, len(self.rows[row]))
        self.rows[row].append(span)

    # -- looking things up ------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self.rows)

    def find(self, node: FlameNode | None) -> tuple[int, int] | None:
        """(row, index) of ``node``'s span, or None when it is not drawn."""
        if node is None:
            return None
        where = self._where.get(id(node))
        if where is None:
            return None
        row, i = where
        return where if self.rows[row][i].node is node else None

    def drawn(self, node: FlameNode | None) -> bool:
        return self.find(node) is not None

    def span(self, node: FlameNode) -> Span | None:
        where = self.find(node)
        return None if where is None else self.rows[where[0]][where[1]]

    def row_of(self, node: FlameNode) -> int | None:
        where = self.find(node)
        return None if where is None else where[0]

    def at(self, row: int, x: int) -> FlameNode | None:
        """The frame drawn at cell ``x`` of ``row`` (None: nothing, or a filler)."""
        if not 0 <= row < len(self.rows):
            return None
        for span in self.rows[row]:
            if span.x <= x < span.end:
                return span.node
        return None

    def first(self) -> FlameNode | None:
        """Where a selection starts: the widest frame of the top row."""
        spans = [s for s in self.rows[0] if s.node is not None] if self.rows else []
        return max(spans, key=lambda s: s.width).node if spans else None

    # -- moving -----------------------------------------------------------------------------
    def parent(self, node: FlameNode) -> FlameNode | None:
        """``node``'s caller, when it is drawn (not above the top row)."""
        up = node.parent
        return up if up is not None and self.drawn(up) else None

    def child(self, node: FlameNode, prefer: Frame | None = None) -> FlameNode | None:
        """The drawn child of ``node`` whose frame is ``prefer``, else its widest drawn child
        (the first in order among equals)."""
        kids = [c for c in ordered_children(node) if self.drawn(c)]
        if not kids:
            return None
        if prefer is not None:
            for c in kids:
                if c.frame == prefer:
                    return c
        return max(kids, key=lambda c: c.total)

    def neighbour(self, node: FlameNode, step: int) -> FlameNode | None:
        """The next (``step`` 1) or previous (-1) frame drawn on ``node``'s row, across
        callers; fillers are skipped."""
        where = self.find(node)
        if where is None:
            return None
        row, i = where
        spans = self.rows[row]
        i += step
        while 0 <= i < len(spans):
            if spans[i].node is not None:
                return spans[i].node
            i += step
        return None


def deepest_shown(
    root: FlameNode, path: list[Frame], shown: Callable[[FlameNode], bool]
) -> FlameNode | None:
    """The deepest node along ``path`` (from ``root``) for which ``shown(node)`` holds: the
    frame itself, or its nearest ancestor still on screen; None when none is."""
    best: FlameNode | None = None
    node = root
    for frame in path:
        nxt = node.children.get(frame)
        if nxt is None:
            break
        node = nxt
        if shown(node):
            best = node
    return best


def fit_label(text: str, room: int) -> str:
    """``text`` in at most ``room`` cells: whole, else the part after the last ``.`` (the
    method of ``Class.method``: what names the frame), cut with ``…`` if it must be."""
    if room <= 0:
        return ""
    if len(text) <= room:
        return text
    method = text.rsplit(".", 1)[-1] or text
    if len(method) <= room:
        return method
    return method[0] if room == 1 else method[: room - 1] + "…"
