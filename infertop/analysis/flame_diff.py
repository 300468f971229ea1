"""A differential flame: the new profile's call tree, each frame with its share in a base.

Frames are matched along their call path by function and short file, not by line: between
two builds of a service the lines move while the calls stay. Shares are of each profile's own
total, so a longer or busier recording compares fairly with a shorter one. A frame's growth is
``new share - base share`` in points of the whole; positive is slower (more of the time).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from infertop.analysis.flame import FlameNode
from infertop.model.events import Frame

Key = tuple[str, str]  # (function, short file)
#: a change under this many points of the whole is drawn as "no change"
STEADY = 0.005


def key_of(frame: Frame) -> Key:
    return frame.function, frame.short_file


class BaseShares:
    """The base profile's total share of every call path (matched by ``key_of``)."""

    def __init__(self, base: FlameNode) -> None:
        self.total = base.total
        self._shares: dict[tuple[Key, ...], float] = {}
        if base.total <= 0:
            return
        stack: list[tuple[FlameNode, tuple[Key, ...]]] = [(base, ())]
        while stack:
            node, path = stack.pop()
            for child in node.children.values():
                assert child.frame is not None
                sub = (*path, key_of(child.frame))
                # lines merged: the same function at two lines is one path
                self._shares[sub] = self._shares.get(sub, 0.0) + child.total / base.total
                stack.append((child, sub))

    def share(self, path: tuple[Key, ...]) -> float:
        return self._shares.get(path, 0.0)

    def paths(self) -> Iterator[tuple[tuple[Key, ...], float]]:
        return iter(self._shares.items())


def path_key(node: FlameNode) -> tuple[Key, ...]:
    return tuple(key_of(f) for f in node.path())


def growth(node: FlameNode, root: FlameNode, base: BaseShares) -> float:
    """Points of the whole ``node`` gained since the base (negative: it shrank)."""
    new = node.total / root.total if root.total else 0.0
    return new - base.share(path_key(node))


@dataclass(frozen=True)
class DiffRow:
    depth: int
    frame: Frame
    new_share: float  # of the new profile's total
    base_share: float  # of the base profile's total, at the same call path

    @property
    def change(self) -> float:
        return self.new_share - self.base_share


def diff_rows(new: FlameNode, base: BaseShares, min_share: float = 0.01) -> list[DiffRow]:
    """Depth-first rows of the new tree (biggest first; lines of one function merged, as they
    are matched), frames under ``min_share`` of the new total left out unless they were that
    big in the base."""
    rows: list[DiffRow] = []
    if new.total <= 0:
        return rows
    merged = _merge_lines(new)
    stack: list[tuple[_Merged, int, tuple[Key, ...]]] = [
        (c, 0, (c.key,)) for c in reversed(merged.sorted())
    ]
    while stack:
        node, depth, path = stack.pop()
        share, was = node.total / new.total, base.share(path)
        if share < min_share and was < min_share:
            continue
        rows.append(DiffRow(depth, node.frame, share, was))
        stack.extend((c, depth + 1, (*path, c.key)) for c in reversed(node.sorted()))
    return rows


def gone_frames(
    new: FlameNode, base: BaseShares, min_share: float = 0.01, limit: int = 10
) -> list[tuple[tuple[Key, ...], float]]:
    """Call paths of at least ``min_share`` in the base that the new profile never reached,
    outermost only (a gone path's callees are gone with it), biggest first."""
    seen: set[tuple[Key, ...]] = set()
    stack: list[tuple[FlameNode, tuple[Key, ...]]] = [
        (c, (key_of(c.frame),)) for c in new.children.values() if c.frame is not None
    ]
    while stack:
        node, path = stack.pop()
        seen.add(path)
        stack.extend((c, (*path, key_of(c.frame))) for c in node.children.values() if c.frame)
    gone = [(p, s) for p, s in base.paths() if s >= min_share and p not in seen]
    outer = [(p, s) for p, s in gone if p[:-1] in seen or len(p) == 1]
    return sorted(outer, key=lambda ps: -ps[1])[:limit]


class _Merged:
    """A node of the new tree with the lines of one function merged, as the base is matched."""

    __slots__ = ("key", "frame", "total", "children")

    def __init__(self, key: Key, frame: Frame) -> None:
        self.key, self.frame, self.total = key, frame, 0
        self.children: dict[Key, _Merged] = {}

    def sorted(self) -> list[_Merged]:
        return sorted(self.children.values(), key=lambda n: (-n.total, n.key))


def _merge_lines(root: FlameNode) -> _Merged:
    top = _Merged(("", ""), Frame("", "", 0))
    stack = [(root, top)]
    while stack:
        node, into = stack.pop()
        for child in node.children.values():
            assert child.frame is not None
            k = key_of(child.frame)
            m = into.children.get(k)
            if m is None:
                m = into.children[k] = _Merged(k, Frame(child.frame.function, child.frame.file, 0))
            m.total += child.total
            stack.append((child, m))
    return top

