"""Drawing one row of the icicle graph (``infertop.tui.icicle`` lays the rows out).

A frame is a bar on its stage's colour with dark text (light text on a dark colour): its
label, cut to the bar, and its share of every sample shown when that fits too. The last cell
of a bar two or more cells wide is left blank (a bar under four cells has no label), so that
siblings of one stage stay apart. The selected frame is drawn white (grey while the panel has
not the focus); while a search is on,
matching frames are bold and underlined and the others are dimmed. Fillers (frames too
narrow to draw) are a dim grey.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from infertop.analysis.flame import FlameNode
from infertop.analysis.ops import DEVICE_FILE
from infertop.tui.flame_search import Search
from infertop.tui.icicle import Span, fit_label
from infertop.tui.palette import stage_color, text_on

SELECTED = Style(bgcolor="#f0f0f0", color="#000000", bold=True)
SELECTED_UNFOCUSED = Style(bgcolor="#9e9e9e", color="#000000", bold=True)
DIMMED = Style(bgcolor="#303030", color="#8a8a8a")
FILLER = Style(bgcolor="#3a3a3a")
MATCH = Style(bold=True, underline=True)
MIN_LABEL = 3  # cells: a narrower bar is drawn without a label

#: (a frame's label, the cells it may take) -> the text to show
Labeller = Callable[[FlameNode, int], str]


def python_label(node: FlameNode, room: int) -> str:
    return fit_label(node.frame.function if node.frame is not None else "all", room)


def bar_text(label: str, share: float, room: int) -> str:
    """The label with the share after it when both fit in ``room`` cells, else the label."""
    pct = f"{share * 100:.1f}%"
    if len(label) + 1 + len(pct) <= room:
        return f"{label} {pct}".ljust(room)
    return label.ljust(room)


#: a frame's colour: its stage's, or (the differential flame) its growth against a base
Colour = Callable[[FlameNode], str]


def by_stage(node: FlameNode) -> str:
    return stage_color(node.stage)


def bar_style(
    node: FlameNode, selected: bool, focused: bool, found: Search | None, colour: Colour = by_stage
) -> Style:
    if selected:
        return SELECTED if focused else SELECTED_UNFOCUSED
    if found is not None and not found.hit(node):
        return DIMMED
    color = colour(node)
    style = Style(bgcolor=color, color=text_on(color))
    if node.frame is not None and node.frame.file == DEVICE_FILE:
        style += Style(italic=True)  # a kernel or copy, as in the list
    return style + MATCH if found is not None else style


def icicle_strip(
    spans: list[Span],
    width: int,
    *,
    total: int,
    selected: FlameNode | None,
    focused: bool,
    found: Search | None,
    label: Labeller,
    colour: Colour = by_stage,
) -> Strip:
    """One row ``width`` cells wide; ``total`` is what shares are of (every sample shown)."""
    segments: list[Segment] = []
    at = 0
    for span in spans:
        if span.x > at:
            segments.append(Segment(" " * (span.x - at)))
        if span.node is None:
            segments.append(Segment(" " * span.width, FILLER))
        else:
            node = span.node
            style = bar_style(node, node is selected, focused, found, colour)
            room = max(1, span.width - 1)
            text = (
                bar_text(label(node, room), node.total / total, room) if room >= MIN_LABEL else ""
            )
            segments.append(Segment(text[:room].ljust(room), style))
            if span.width > 1:
                segments.append(Segment(" "))
        at = span.end
    return Strip(segments).adjust_cell_length(width)
