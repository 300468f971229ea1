"""CPU contention, one concept: how long each process's threads waited on a run queue for a
CPU, of their runnable time, from the ``CpuWait`` events the sampler reads as each window ends
(``collect/thread_cpu.ProcessCpuWaits``: the kernel's schedstat, nothing asked of the target).

Everything that needs to know whether the host was short of CPU reads it here: the
``cpu-starved`` finding, the straggler rule (a replica slower because it waited for a CPU is the
host's doing, not the replica's), and the triggers (a firing in a starved window says so).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from infertop.model.events import CpuWait, waited_share


@dataclass(frozen=True)
class ProcessCpu:
    """One process's threads over a session: seconds on a CPU and waiting for one."""

    pid: int
    run_s: float
    wait_s: float

    @property
    def waited(self) -> float | None:
        """The share of the runnable time spent waiting for a CPU; None: no runnable time."""
        return waited_share(self.run_s, self.wait_s)


@dataclass(frozen=True)
class CpuContention:
    """Every process read, busiest first; ``waited``: all of them together."""

    processes: tuple[ProcessCpu, ...]

    @property
    def waited(self) -> float | None:
        return waited_share(sum(p.run_s for p in self.processes), sum(p.wait_s for p in self.processes))

    def of(self, pid: int) -> ProcessCpu | None:
        return next((p for p in self.processes if p.pid == pid), None)


def waited_by_pid(c: CpuContention | None) -> dict[int, float]:
    """pid -> the share of its runnable time its threads waited for a CPU (none: not read)."""
    if c is None:
        return {}
    return {p.pid: w for p in c.processes if (w := p.waited) is not None}


class CpuTotals:
    """Nanoseconds on a CPU and waiting for one, summed by process (what a live session keeps of
    the readings it folds)."""

    def __init__(self) -> None:
        self.by_pid: dict[int, tuple[int, int]] = {}

    def add(self, waits: Iterable[CpuWait]) -> None:
        for w in waits:
            run, wait = self.by_pid.get(w.pid, (0, 0))
            self.by_pid[w.pid] = (run + w.run_ns, wait + w.wait_ns)


def contention(
    waits: Iterable[CpuWait],
    folded: CpuTotals | None = None,
    t0: float | None = None,
    t1: float | None = None,
    pid: int | None = None,
) -> CpuContention | None:
    """Each process's CPU waits over the readings that ended in (``t0``, ``t1``] (None: no
    bound; ``folded``: readings a live session no longer keeps, counted when ``t0`` is None);
    only ``pid``'s where given. None where nothing was read."""
    totals = CpuTotals()
    if folded is not None and t0 is None:
        totals.by_pid = dict(folded.by_pid)
    totals.add(
        w for w in waits
        if (t0 is None or w.t_end > t0) and (t1 is None or w.t_end <= t1) and (pid is None or w.pid == pid)
    )  # fmt: skip
    rows = [
        ProcessCpu(p, run / 1e9, wait / 1e9)
        for p, (run, wait) in totals.by_pid.items()
        if (pid is None or p == pid) and run + wait > 0
    ]
    if not rows:
        return None
    return CpuContention(tuple(sorted(rows, key=lambda r: -(r.run_s + r.wait_s))))
