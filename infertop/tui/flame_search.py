"""Searching the flame (key ``/``), without Textual: which frames match, and what share of
the samples they hold.

A pattern is a glob when it has ``*``, ``?`` or ``[`` (``tokeniz*``), else a substring; either
is matched, ignoring case, against the function name, and for convenience against the file
(a glob against the file's name or its whole path). The share counts each stack path once: a
matching frame called under another matching frame adds nothing, so ``encode*`` over
``encode_batch → encode`` is the share of ``encode_batch``, not the sum of both. A big tree
is counted on a thread (``Finisher``), so the UI thread never walks more than ``SYNC_NODES``
nodes of it.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable

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
    count = MatchCount(node, matches)
    count.run()
    return count.total


class MatchCount:
    """``matched_total`` in steps: ``run(budget)`` visits at most ``budget`` nodes and says
    whether the count is done; a later ``run()`` goes on where it stopped."""

    def __init__(self, node: FlameNode, matches: Callable[[Frame], bool]) -> None:
        self.matches = matches
        self.total = 0
        self._stack = [node]

    def run(self, budget: int | None = None) -> bool:
        stack, matches, total, n = self._stack, self.matches, self.total, 0
        while stack and (budget is None or n < budget):
            node = stack.pop()
            n += 1
            if node.frame is not None and matches(node.frame):
                total += node.total
            else:
                stack.extend(node.children.values())
        self.total = total
        return not stack


#: nodes counted at once on the UI thread; a bigger tree is finished on a thread
SYNC_NODES = 20_000


class Search:
    """A search over one tree: the pattern, its frame test, and the samples of the matching
    frames (counted once per stack path) out of the tree's; ``total`` is None until a tree
    too big to count at once has been counted (``finish``, on another thread)."""

    def __init__(self, pattern: str, root: FlameNode, budget: int | None = SYNC_NODES) -> None:
        self.pattern = pattern
        self.matches = frame_matcher(pattern)
        self.of = root.total
        self._count = MatchCount(root, self.matches)
        self.done = self._count.run(budget)

    def finish(self) -> None:
        self._count.run()
        self.done = True

    @property
    def total(self) -> int | None:
        return self._count.total if self.done else None

    @property
    def share(self) -> float | None:
        total = self.total
        return None if total is None else (total / self.of if self.of else 0.0)

    def hit(self, node: FlameNode) -> bool:
        return node.frame is not None and self.matches(node.frame)


def search(root: FlameNode, pattern: str, budget: int | None = SYNC_NODES) -> Search | None:
    """``pattern`` over the tree under ``root``; None for an empty pattern."""
    pattern = pattern.strip()
    return Search(pattern, root, budget) if pattern else None


def search_text(found: Search | None) -> str:
    """``tokeniz*: 26.1 %`` (``tokeniz*: …`` while it is being counted)."""
    if found is None:
        return ""
    share = found.share
    return f"{found.pattern}: {'…' if share is None else f'{share * 100:.1f} %'}"


class Finisher:
    """Counts the searches too big to count at once on one short-lived thread, the newest
    only, and hands each to ``done`` (on that thread)."""

    def __init__(self, done: Callable[[Search], None]) -> None:
        self._done = done
        self._lock = threading.Lock()
        self._next: Search | None = None
        self._thread: threading.Thread | None = None

    def submit(self, found: Search) -> None:
        with self._lock:
            self._next = found
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="infertop-flame-search", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                found, self._next = self._next, None
                if found is None:
                    self._thread = None
                    return
            found.finish()
            self._done(found)
