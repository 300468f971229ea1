"""Searching the flame (key ``/``), without Textual: which frames match, and what share of
the samples they hold.

A pattern is a glob when it has ``*``, ``?`` or ``[`` (``tokeniz*``), else a substring; either
is matched, ignoring case, against the function name, and for convenience against the file
(a glob against the file's name or its whole path). The share counts each stack path once: a
matching frame called under another matching frame adds nothing, so ``encode*`` over
``encode_batch → encode`` is the share of ``encode_batch``, not the sum of both.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field

from infertop.analysis.flame import FlameNode
from infertop.model.events import Frame

GLOB_CHARS = frozenset("*?[")


def frame_matcher(pattern: str) -> Callable[[Frame], bool]:
    """A test of one frame against ``pattern`` (see the module's text); results are cached,
    since one frame occurs at many places in a tree."""
    needle = pattern.casefold()
    glob = bool(GLOB_CHARS & set(needle))
    cache: dict[Frame, bool] = {}

    def test(frame: Frame) -> bool:
        hit = cache.get(frame)
        if hit is None:
            function, file = frame.function.casefold(), frame.file.casefold()
            if glob:
                name = file.replace("\\", "/").rsplit("/", 1)[-1]
                hit = any(fnmatch.fnmatchcase(s, needle) for s in (function, name, file) if s)
            else:
                hit = needle in function or needle in file
            cache[frame] = hit
        return hit

    return test


def matched_total(node: FlameNode, matches: Callable[[Frame], bool]) -> int:
    """Samples under ``node`` (itself included) in at least one matching frame, each counted
    once: the totals of the outermost matching frames."""
    total = 0
    stack = [node]
    while stack:
        n = stack.pop()
        if n.frame is not None and matches(n.frame):
            total += n.total
        else:
            stack.extend(n.children.values())
    return total


@dataclass(frozen=True)
class Search:
    """A search over one tree: the pattern, the matching frames found in it, and their
    samples (counted once per stack path) out of the tree's."""

    pattern: str
    matches: Callable[[Frame], bool] = field(compare=False, repr=False)
    total: int = 0
    of: int = 0

    @property
    def share(self) -> float:
        return self.total / self.of if self.of else 0.0

    def hit(self, node: FlameNode) -> bool:
        return node.frame is not None and self.matches(node.frame)


def search(root: FlameNode, pattern: str) -> Search | None:
    """``pattern`` over the tree under ``root``; None for an empty pattern."""
    pattern = pattern.strip()
    if not pattern:
        return None
    matches = frame_matcher(pattern)
    return Search(pattern, matches, matched_total(root, matches), root.total)


def search_text(found: Search | None, zoom: FlameNode | None = None) -> str:
    """``tokeniz*: 26.1 %`` (and ``, 55.0 % of the zoom`` when zoomed into ``zoom``)."""
    if found is None:
        return ""
    text = f"{found.pattern}: {found.share * 100:.1f} %"
    if zoom is not None and zoom.frame is not None and zoom.total:
        text += f", {matched_total(zoom, found.matches) / zoom.total * 100:.1f} % of the zoom"
    return text
