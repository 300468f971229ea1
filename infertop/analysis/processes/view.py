"""One process's share of a ``--children`` session, for the UI's process view (key ``w``).

``ProcessFilter`` turns the session's merged sample windows into the chosen process's: only the
samples of its threads, stage counts recomputed (idle is 0: py-spy's idle time is known per
window for all processes together, not per process). Filtered windows and stack counts are
cached, so a live view only filters what arrived since the last snapshot.
"""

from __future__ import annotations

from infertop.analysis.ops import OpTotals
from infertop.analysis.processes.shares import roles
from infertop.analysis.session import Session
from infertop.analysis.windows import WindowSummary, split_by_pid
from infertop.model.events import AllocatorReading


def process_labels(session: Session) -> tuple[tuple[int, str], ...]:
    """(pid, role) of every followed process, the target first, then by pid."""
    return tuple(roles(session).items())


def process_op_totals(session: Session, pid: int, t: float | None) -> OpTotals:
    """The torch-profiler totals of one process's agent up to ``t``, folded windows included
    (op windows name their process; 0 is the target)."""
    keys = _keys(session, pid)
    totals = OpTotals()
    for key in keys:
        folded = session.folded_ops_by_pid.get(key)
        if folded is not None:
            totals.absorb(folded)
    for w in session.op_windows_between(None, t):
        if w.pid in keys:
            totals.add(w)
    return totals


def _keys(session: Session, pid: int) -> tuple[int, ...]:
    """The ``pid`` values a process's op windows and allocator readings carry: its own, and
    0 too for the target (an agent's windows in the target are written without one)."""
    return (0, pid) if pid == session.target.pid else (pid,)


def allocator_of(session: Session, pid: int, t: float | None) -> AllocatorReading | None:
    """The newest allocator reading of one process's agent at or before ``t``."""
    keys = _keys(session, pid)
    for r in reversed(session.allocator):
        if r.pid in keys and (t is None or r.t <= t):
            return r
    return None


class ProcessFilter:
    """The windows and stack counts of one process, extended as the session grows."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None  # (id(session), pid)
        self._windows: list[WindowSummary] = []
        self._base = 0  # session window number of _windows[0] (a bounded session folds)
        self._stacks: dict[int, int] = {}

    def windows(
        self, session: Session, pid: int, n: int
    ) -> tuple[list[WindowSummary], dict[int, int]]:
        """The first ``n`` session windows kept (a bounded session's folded ones are in its
        ``folded_by_pid``), filtered to ``pid``; and their stack counts, folded ones included."""
        key = (id(session), pid)
        base = session.windows_folded
        seen = self._base + len(self._windows)
        if key != self._key or base + n < seen or seen < base:
            folded = session.folded_by_pid.get(pid)
            self._key, self._windows, self._base = key, [], base
            self._stacks = dict(folded.stacks) if folded is not None else {}
        elif self._base < base:  # the session folded some: so do we
            del self._windows[: base - self._base]
            self._base = base
        owner = session.thread_pid
        target = session.target.pid
        for ws in session.windows[len(self._windows) : n]:
            mine = split_by_pid(ws, owner, target or 0, (pid,))[pid]
            if not ws.wall:  # the flame is of CPU windows
                for _tid, sid, c in mine.window.counts:
                    self._stacks[sid] = self._stacks.get(sid, 0) + c
            self._windows.append(mine)
        return self._windows[:n], self._stacks
