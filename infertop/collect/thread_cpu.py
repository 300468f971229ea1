"""Each thread's time from the kernel, to keep py-spy's "active" honest in CPU windows.

py-spy calls a thread active when it is not inside a system call at the moment it looks. Its
own stops make that answer wrong for a sleeping thread now and then (measured: a helper thread
that only sleeps in ``time.sleep(1)`` came out active in 7 % of CPU-window samples, most of
the CPU view's ``other``). The kernel knows better: ``/proc/PID/task/TID/schedstat`` holds
the nanoseconds each thread ran and waited on a run queue for a CPU. A thread cannot have more
active samples in a window than that runnable time allows (with slack for sampling's
randomness); beyond that, they were sleeps. Runnable, not only on a CPU: a thread that waits
for a CPU on a machine whose cores are full is where py-spy sees it, in its stage's code, and
its request waits there too (cut to its time on a CPU, a target that shared a core with two
hogs lost two thirds of its active samples, and the wall view, which caps a thread's ``other``
by its active rate, moved the rest of its ``other`` to ``idle``: other 0.19 of the wall view
against its true third). Reading it costs the target nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from infertop import procfs
from infertop.model.events import CpuWait

SLACK = 1.5  # a share of samples is Poisson: allow half as much again as the CPU time says
SPARE = 0.5  # and half a sample more: a thread that ran 10 ms keeps up to 2 samples at 100 Hz


def _schedstats(pids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """(ns on CPU, ns waiting on a run queue) of every thread of ``pids``; gone ones left out."""
    out: dict[int, tuple[int, int]] = {}
    for pid in pids:
        try:
            tids = procfs.threads(pid)
        except OSError:
            continue
        for tid in tids:
            try:
                on, wait, _ = procfs.schedstat(pid, tid)
            except (OSError, ValueError):
                continue
            out[tid] = (on, wait)
    return out


def run_and_wait_ns(pids: Iterable[int]) -> tuple[int, int]:
    """Nanoseconds on a CPU and waiting on a run queue, summed over every thread of ``pids``
    since each began."""
    stats = _schedstats(pids).values()
    return sum(on for on, _ in stats), sum(wait for _, wait in stats)


def thread_cpu_ns(pids: Iterable[int]) -> dict[int, int]:
    """Nanoseconds on CPU of every thread of ``pids`` (thread id -> ns); gone ones left out."""
    return {tid: on for tid, (on, _) in _schedstats(pids).items()}


def thread_runnable_ns(pids: Iterable[int]) -> dict[int, int]:
    """Nanoseconds runnable (on a CPU or waiting on a run queue for one) of every thread of
    ``pids`` (thread id -> ns); gone ones left out."""
    return {tid: on + wait for tid, (on, wait) in _schedstats(pids).items()}


class ProcessCpuWaits:
    """Each process's threads: how long they ran and waited for a CPU between one ``read`` and
    the next, as ``CpuWait`` events (the sampler reads them as each window ends: the one place
    CPU contention is measured; nothing asked of the target)."""

    def __init__(self) -> None:
        #: pid -> (when read, tid -> (ns on CPU, ns waiting), cumulative)
        self._last: dict[int, tuple[float, dict[int, tuple[int, int]]]] = {}

    def read(self, pids: Iterable[int], t: float) -> list[CpuWait]:
        """The intervals since each process's last read that ended at ``t`` (a process read for
        the first time gives none; its threads born or gone in between count from their next)."""
        out: list[CpuWait] = []
        seen: dict[int, tuple[float, dict[int, tuple[int, int]]]] = {}
        for pid in pids:
            now = _schedstats([pid])
            if not now:
                continue  # gone, or not ours to read
            seen[pid] = (t, now)
            was = self._last.get(pid)
            if was is None or t <= was[0]:
                continue
            run = waited = 0
            for tid, (on, wait) in now.items():
                before = was[1].get(tid)
                if before is not None and on >= before[0] and wait >= before[1]:
                    run += on - before[0]
                    waited += wait - before[1]
            out.append(CpuWait(was[0], t, pid, run, waited))
        self._last = seen
        return out


def clamp_to_runnable(
    rows: list[tuple[int, str, tuple, int]],
    before: dict[int, int],
    after: dict[int, int],
    rate_hz: float,
) -> list[tuple[int, str, tuple, int]]:
    """Rows (tid, name, stack, n) of a CPU window with each thread's active samples cut to what
    its runnable time over the window allows (``before``/``after``: ``thread_runnable_ns``); a
    thread the kernel knows nothing of is left as is."""
    if not before or not after:
        return rows
    per_thread: dict[int, int] = {}
    for tid, _name, _stack, n in rows:
        per_thread[tid] = per_thread.get(tid, 0) + n
    keep: dict[int, int] = {}  # tid -> samples it may keep
    for tid, n in per_thread.items():
        if tid not in before or tid not in after:
            continue
        allowed = int((after[tid] - before[tid]) / 1e9 * rate_hz * SLACK + SPARE)
        if n > allowed:
            keep[tid] = max(0, allowed)
    if not keep:
        return rows
    out = []
    left = dict(keep)
    # a clamped thread's samples shrink in proportion, its biggest stacks first to the remainder
    for i in sorted(range(len(rows)), key=lambda i: -rows[i][3]):
        tid, name, stack, n = rows[i]
        if tid in keep:
            m = min(left[tid], -(-n * keep[tid] // per_thread[tid]))
            left[tid] -= m
            n = m
        if n > 0:
            out.append((i, (tid, name, stack, n)))
    return [row for _i, row in sorted(out)]
