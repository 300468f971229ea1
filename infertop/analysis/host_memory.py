"""Each process's host memory over a session (``HostMemoryReading``s, oldest first): RSS first,
last and peak, swap, page faults per second, its growth rate past warm-up and its memory
cgroup's limit, usage and OOM kills — the report's ``memory`` section and the memory panel.

Pure functions. The growth rate is the least-squares slope of RSS over time, fitted to the
readings after warm-up (the first quarter of the process's readings' span, at most a minute),
with R² as its confidence; fewer than 5 readings or 5 seconds after warm-up: no rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infertop.model.host_memory import CgroupMemory, HostMemoryReading

#: past a live session's horizon, one reading per process is kept per this many seconds
#: (with the bucket's peak): the slope, first and peak stay, memory stops growing
THIN_S = 30.0
WARMUP_SHARE = 0.25
WARMUP_MAX_S = 60.0
MIN_FIT_READINGS = 5
MIN_FIT_S = 5.0
RECENT_S = 5.0  # the panel's "now" for rates


def thin(readings: Sequence[HostMemoryReading], every_s: float = THIN_S) -> list[HostMemoryReading]:
    """Of each process's readings, per ``every_s`` seconds, the first and the one of highest
    RSS; order kept. Idempotent."""
    keep: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, bucket) -> (first i, peak i)
    for i, r in enumerate(readings):
        key = (r.pid, int(r.t // every_s))
        got = keep.get(key)
        if got is None:
            keep[key] = (i, i)
        elif (r.rss or 0) > (readings[got[1]].rss or 0):
            keep[key] = (got[0], i)
    wanted = sorted({i for pair in keep.values() for i in pair})
    return [readings[i] for i in wanted]


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    pid: int
    t_first: float
    t_last: float
    rss_first: int
    rss_last: int
    rss_max: int
    rss_anon: int | None  # the newest reading's split
    rss_file: int | None
    rss_shmem: int | None
    swap_last: int | None
    swap_max: int | None
    major_faults_per_s: float | None  # over the whole span; None: one reading
    minor_faults_per_s: float | None
    recent_major_faults_per_s: float | None  # over the last RECENT_S seconds
    growth_bytes_per_s: float | None  # past warm-up; None: too few readings
    growth_r2: float | None
    cgroup: CgroupMemory | None  # the newest reading's
    oom_kills_during: int | None  # the cgroup's OOM kills between its first and newest reading

    @property
    def headroom(self) -> int | None:
        """Bytes left under the cgroup's limit; None: no limit known."""
        cg = self.cgroup
        if cg is None or cg.limit is None or cg.usage is None:
            return None
        return cg.limit - cg.usage


@dataclass(frozen=True, slots=True)
class HostMemorySummary:
    processes: tuple[ProcessMemory, ...]  # in the order first read (the target first)

    @property
    def growth_bytes_per_s(self) -> float | None:
        """The fastest-growing process's rate."""
        rates = [p.growth_bytes_per_s for p in self.processes if p.growth_bytes_per_s is not None]
        return max(rates) if rates else None


def _rate(a: int | None, b: int | None, dt: float) -> float | None:
    if a is None or b is None or dt <= 0:
        return None
    return max(0, b - a) / dt


def fit_growth(points: Sequence[tuple[float, int]]) -> tuple[float, float] | None:
    """(slope in bytes/s, R²) of RSS over time past warm-up; None: too few points."""
    if not points:
        return None
    t0, t1 = points[0][0], points[-1][0]
    start = t0 + min(WARMUP_MAX_S, WARMUP_SHARE * (t1 - t0))
    fit = [(t - start, float(v)) for t, v in points if t >= start]
    if len(fit) < MIN_FIT_READINGS or fit[-1][0] - fit[0][0] < MIN_FIT_S:
        return None
    n = len(fit)
    mt = sum(t for t, _ in fit) / n
    mv = sum(v for _, v in fit) / n
    stt = sum((t - mt) ** 2 for t, _ in fit)
    stv = sum((t - mt) * (v - mv) for t, v in fit)
    svv = sum((v - mv) ** 2 for _, v in fit)
    if stt <= 0:
        return None
    slope = stv / stt
    r2 = 1.0 if svv == 0 else stv * stv / (stt * svv)
    return slope, r2


def _process(pid: int, rs: list[HostMemoryReading]) -> ProcessMemory:
    with_rss = [r for r in rs if r.rss is not None]
    first, last = rs[0], rs[-1]
    dt = last.t - first.t
    recent = [r for r in rs if r.t >= last.t - RECENT_S]
    fit = fit_growth([(r.t, r.rss) for r in with_rss])  # type: ignore[misc]
    swaps = [r.swap for r in rs if r.swap is not None]
    kills = [
        r.cgroup.oom_kills for r in rs if r.cgroup is not None and r.cgroup.oom_kills is not None
    ]
    return ProcessMemory(
        pid=pid,
        t_first=first.t,
        t_last=last.t,
        rss_first=with_rss[0].rss or 0,
        rss_last=with_rss[-1].rss or 0,
        rss_max=max(r.rss or 0 for r in with_rss),
        rss_anon=last.rss_anon,
        rss_file=last.rss_file,
        rss_shmem=last.rss_shmem,
        swap_last=last.swap,
        swap_max=max(swaps) if swaps else None,
        major_faults_per_s=_rate(first.major_faults, last.major_faults, dt),
        minor_faults_per_s=_rate(first.minor_faults, last.minor_faults, dt),
        recent_major_faults_per_s=_rate(
            recent[0].major_faults, recent[-1].major_faults, recent[-1].t - recent[0].t
        ),
        growth_bytes_per_s=None if fit is None else fit[0],
        growth_r2=None if fit is None else fit[1],
        cgroup=last.cgroup,
        oom_kills_during=max(0, kills[-1] - kills[0]) if kills else None,
    )


def summarize_host_memory(readings: Sequence[HostMemoryReading]) -> HostMemorySummary | None:
    """Each process's memory over ``readings``; None when no reading has an RSS."""
    by_pid: dict[int, list[HostMemoryReading]] = {}
    for r in readings:
        by_pid.setdefault(r.pid, []).append(r)
    procs = tuple(
        _process(pid, rs) for pid, rs in by_pid.items() if any(r.rss is not None for r in rs)
    )
    return HostMemorySummary(procs) if procs else None
