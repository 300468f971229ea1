"""The flame's text apart from the icicle: the indented list's rows and their drawing, the
zoom breadcrumb, the detail line of the selected frame, and an op's short label."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from infertop.analysis.flame import FlameNode
from infertop.analysis.flame_diff import BaseShares, path_key
from infertop.analysis.ops import DEVICE_FILE
from infertop.model.events import Frame
from infertop.tui.flame_search import Search
from infertop.tui.icicle import fit_label
from infertop.tui.palette import bar, stage_color
from infertop.tui.widgets.icicle import MATCH
from infertop.tui.widgets.ops import short_name

MIN_SHARE = 0.005  # rows under 0.5 % of the zoomed root are left out
MAX_INDENT = 24


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


def list_strip(
    row: FlameRow,
    width: int,
    *,
    root: FlameNode,
    zoom: FlameNode,
    selected: bool,
    focused: bool,
    found: Search | None,
    ops: bool,
    colour: Callable[[FlameNode], str] | None = None,
) -> Strip:
    """One row of the list ``width`` cells wide: the bar (its share of ``zoom``), total %
    and self % (of ``root``), then the function indented by depth and its file:line (for
    ops: the time and the device, then the name); a search's matches are highlighted."""
    node = row.node
    assert node.frame is not None
    color = colour(node) if colour is not None else stage_color(node.stage)
    base = (
        Style(bgcolor="#2a3850")
        if selected and focused
        else (Style(bgcolor="#303030") if selected else Style())
    )
    bar_w = 10 if width >= 70 else 6
    filled, empty = bar(node.total / zoom.total if zoom.total else 0.0, bar_w)
    total_pct = node.total / root.total * 100 if root.total else 0.0
    self_pct = node.self_count / root.total * 100 if root.total else 0.0
    indent = "·" * row.depth if row.depth <= MAX_INDENT else "…" + "·" * (MAX_INDENT - 1)
    frame = node.frame
    numbers = f"{total_pct:6.1f}%{self_pct:6.1f}%  "
    if ops:  # µs: the time and the device go before the (long) name
        device = frame.file == DEVICE_FILE
        numbers += f"{node.total / 1000:9.2f} ms {'gpu' if device else 'cpu'}  "
        room = width - len(filled) - len(empty) - len(numbers) - len(indent)
        name, where = short_name(frame.function, max(8, room)), ""
    else:
        device, name = False, frame.function
        where = f"  {frame.short_file}:{frame.line}" if frame.line else f"  {frame.short_file}"
    name_style = base + Style(color=color, bold=not device, italic=device)
    if found is not None and found.hit(node):
        name_style += MATCH + Style(reverse=True)
    segments = [
        Segment(filled, base + Style(color=color)),
        Segment(empty, base + Style(bgcolor="#262626" if not selected else None)),
        Segment(numbers, base + Style(bold=selected)),
        Segment(indent, base + Style(color="#4e4e4e")),
        Segment(name, name_style),
        Segment(where, base + Style(color="#8a8a8a")),
    ]
    return Strip(segments).crop(0, width).extend_cell_length(width, base)


def ops_label(node: FlameNode, room: int) -> str:
    """An op's name without ``aten::`` when it is too long (cut at the end), a kernel's as
    the ops table shortens it (its end names it)."""
    frame = node.frame
    if frame is None:
        return "all"
    if frame.file == DEVICE_FILE or len(frame.function) <= room:
        return short_name(frame.function, room)
    return fit_label(frame.function.removeprefix("aten::"), room)


def frame_detail(
    node: FlameNode | None, root: FlameNode | None, zoom: FlameNode | None, ops: bool, width: int,
    base: BaseShares | None = None, base_label: str = "base", own: BaseShares | None = None,
) -> Text:  # fmt: skip
    """The detail line: the selected frame's full name, where it is, its total and self
    share of every sample shown (``root``; and of the zoomed frame ``zoom``, None when not
    zoomed), with a ``base`` (replay --base; the tail view's typical calls, ``base_label``)
    its share there and the change, and its stage. ``own``: the shown tree's shares with
    lines merged, as the base is matched (the change is of the call path, not the line)."""
    if node is None or node.frame is None or root is None or not root.total:
        return Text("")
    frame = node.frame
    shares = f"total {node.total / root.total:.1%}, self {node.self_count / root.total:.1%}"
    if base is not None:
        path = path_key(node)
        was, now = base.share(path), node.total / root.total
        merged = ""
        if own is not None and abs(own.share(path) - now) >= 0.0005:
            now = own.share(path)  # the function at other lines of its caller too
            merged = f"lines merged {now:.1%}; "
        shares += f" ({merged}{base_label} {was:.1%}, {(now - was) * 100:+.1f} pts)"
    in_zoom = ""
    if zoom is not None and zoom.total and zoom is not node:
        in_zoom = f"in zoom {node.total / zoom.total:.1%}, {node.self_count / zoom.total:.1%}"
    if ops:
        kind = "gpu kernel" if frame.file == DEVICE_FILE else "cpu op"
        wheres = [f"{kind}, {node.total / 1000:.2f} ms"] * 3
    else:
        file_name = frame.file.replace("\\", "/").rsplit("/", 1)[-1]
        line = f":{frame.line}" if frame.line else ""  # 0: function-level frames (key n)
        wheres = [f"{f}{line}" for f in (frame.file, frame.short_file, file_name)]
    stage, name = node.stage, frame.function
    tail = ""
    for where, zoomed in (
        *((w, in_zoom) for w in wheres),
        (wheres[2], ""),
        ("", ""),
    ):
        tail = " · ".join(p for p in (where, shares, zoomed) if p)
        if len(name) + len(tail) + len(stage) + 5 <= width:
            break
    room = width - len(tail) - len(stage) - 5
    if len(name) > room:
        name = name[: max(1, room - 1)] + "…"
    text = Text(name, style="bold")
    text.append("  " + tail)
    text.append(" · ")
    text.append(stage, style=stage_color(stage))
    text.truncate(width, overflow="ellipsis")
    return text
