"""A sample window as the session keeps it (``WindowSummary``: its stage counts, CPU and wall
views, per thread), windows summed (``WindowTotals``: what a bounded session keeps of windows
past its horizon) and one window split by process (``split_by_pid``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from infertop.analysis.stages import IDLE
from infertop.model.events import SampleWindow


@dataclass(slots=True)
class WindowSummary:
    """One sample window with its stage counts, computed once at ingest.

    A CPU window's counts are of active samples, plus the derived ``idle``; a wall window's
    (``wall``) are of the wall view: every sample of the pipeline threads (``analysis/wall.py``).
    ``by_thread`` holds the same counts per thread (empty for windows made by hand).
    ``wall_counts`` / ``wall_by_thread`` are the window's wall view whichever its kind (a CPU
    window's estimated from its active samples; None before any wall window)."""

    window: SampleWindow
    stage_counts: dict[str, int]
    active: int
    idle: int
    wall: bool = False
    by_thread: dict[int, dict[str, int]] = field(default_factory=dict)
    wall_counts: dict[str, int] | None = None
    wall_by_thread: dict[int, dict[str, int]] = field(default_factory=dict)


@dataclass(slots=True)
class WindowTotals:
    """Sample windows summed: what a bounded session keeps of windows past its horizon."""

    windows: int = 0
    stage_counts: dict[str, int] = field(default_factory=dict)  # CPU windows'
    stacks: dict[int, int] = field(default_factory=dict)  # stack id -> samples (CPU windows)
    active: int = 0  # CPU windows' active samples
    errors: int = 0
    sampled_s: float = 0.0
    wall_windows: int = 0  # windows with a wall view (wall windows, and CPU windows after one)
    wall_counts: dict[str, int] = field(default_factory=dict)  # the wall view's
    wall_sampled_s: float = 0.0
    cpu_sampled_s: float = 0.0
    t_first: float | None = None  # the first folded window's start
    t_end: float = float("-inf")  # the newest folded window's end
    #: (start, end) of the stretches in which the target did work (samples outside idle and
    #: queue), neighbours less than a second apart joined: when the GPU should have been busy
    working: list[tuple[float, float]] = field(default_factory=list)

    def add(self, ws: WindowSummary) -> None:
        w = ws.window
        self.windows += 1
        self.errors += w.errors
        self.sampled_s += w.t_end - w.t_start
        if ws.wall_counts is not None:
            self.wall_windows += 1
            self.wall_sampled_s += w.t_end - w.t_start
            for s, n in ws.wall_counts.items():
                self.wall_counts[s] = self.wall_counts.get(s, 0) + n
        if not ws.wall:
            self.cpu_sampled_s += w.t_end - w.t_start
            for s, n in ws.stage_counts.items():
                self.stage_counts[s] = self.stage_counts.get(s, 0) + n
            for _tid, sid, n in w.counts:
                self.stacks[sid] = self.stacks.get(sid, 0) + n
            self.active += ws.active
        if self.t_first is None:
            self.t_first = w.t_start
        self.t_end = max(self.t_end, w.t_end)
        if any(n for s, n in ws.stage_counts.items() if s not in (IDLE, "queue")):
            if self.working and w.t_start - self.working[-1][1] < 1.0:
                self.working[-1] = (self.working[-1][0], max(self.working[-1][1], w.t_end))
            else:
                self.working.append((w.t_start, w.t_end))


def split_by_pid(
    ws: WindowSummary, owner: dict[int, int], target: int, pids: Iterable[int] = ()
) -> dict[int, WindowSummary]:
    """One window as each process's view has it: its threads' samples and stage counts (idle
    0: a CPU window's idle time is known for all processes together, not per process). Every
    pid in ``pids`` gets a window, empty if none of its threads was sampled."""
    rows: dict[int, list[tuple[int, int, int]]] = {pid: [] for pid in pids}
    for c in ws.window.counts:
        rows.setdefault(owner.get(c[0], target), []).append(c)
    out: dict[int, WindowSummary] = {}
    for pid, counts in rows.items():
        tids = list(dict.fromkeys(c[0] for c in counts))
        by_thread, stage_counts = _threads_of(ws.by_thread, tids)
        wall_by_thread, wall_counts = _threads_of(ws.wall_by_thread, tids)
        active = sum(stage_counts.values())
        window = replace(ws.window, counts=tuple(counts))
        out[pid] = WindowSummary(
            window, {**stage_counts, IDLE: 0}, active, 0, ws.wall, by_thread,
            None if ws.wall_counts is None else {**wall_counts, IDLE: 0}, wall_by_thread,
        )  # fmt: skip
    return out


def _threads_of(
    by_thread: dict[int, dict[str, int]], tids: Iterable[int]
) -> tuple[dict[int, dict[str, int]], dict[str, int]]:
    """The per-thread counts of ``tids`` and their stages summed, idle left out."""
    mine: dict[int, dict[str, int]] = {}
    summed: dict[str, int] = {}
    for tid in tids:
        per = by_thread.get(tid)
        if per is None:
            continue
        mine[tid] = per
        for stage, n in per.items():
            if stage != IDLE:
                summed[stage] = summed.get(stage, 0) + n
    return mine, summed
