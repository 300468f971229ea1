"""Each process's host memory over a session (``HostMemoryReading``s, oldest first): RSS first,
last and peak, swap, page faults per second, its growth rate past warm-up and its memory
cgroup's limit, usage and OOM kills — the report's ``memory`` section and the memory panel.

Pure functions. The growth rate is the least-squares slope of RSS over time, fitted to the
readings after warm-up (the first quarter of the process's readings' span, at most a minute),
with R² as its confidence; fewer than 5 readings or 5 seconds after warm-up: no rate. The same
slope over the last third of those readings tells a steady leak (still growing at the end) from
a cache that filled and stays flat (``memory-growth``, analysis/findings/memory.py); divided by
the process's timed calls per second over the fit (its requests where requests are named,
else its forward calls) it is the growth per call.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from infertop.model.events import StageSpan
from infertop.model.host_memory import CgroupMemory, HostMemoryReading, ObjectCensus

#: past a live session's horizon, one reading per process is kept per this many seconds
#: (with the bucket's peak): the slope, first and peak stay, memory stops growing
THIN_S = 30.0
WARMUP_SHARE = 0.25
WARMUP_MAX_S = 60.0
MIN_FIT_READINGS = 5
MIN_FIT_S = 5.0
RECENT_S = 5.0  # the panel's "now" for rates
RECENT_SHARE = 1 / 3  # the end of the fit whose own slope says whether it still grows
MIN_RECENT_READINGS = 3
MIN_CALLS = 10  # timed calls in the fit, for a growth per call
#: what grows, from the agent's object censuses: at least this many censuses over this many
#: seconds; a container or type grows when it rose between most censuses (RISING_SHARE of the
#: pairs) and between the last two, by at least GROW_MIN_ITEMS items / GROW_MIN_OBJECTS objects
MIN_CENSUSES = 3
MIN_CENSUS_S = 10.0
RISING_SHARE = 2 / 3
GROW_MIN_ITEMS = 50
GROW_MIN_OBJECTS = 500
MAX_GROWING = 5  # of each: containers, types


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
class Growing:
    """A container or a type that grows over a process's censuses."""

    what: str  # "container" (its items) or "objects" (a type's instances)
    type: str  # the container's kind (list, dict, ...) or the type's name
    name: str | None  # the module global that holds the container (None: none found)
    count_first: int  # items, or objects
    count_last: int
    count_per_s: float
    bytes_last: int | None  # the container's estimated bytes (None: not estimated, a type)
    bytes_per_s: float | None
    censuses: int  # in which it was seen


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
    #: the fit's readings: from the end of warm-up to the newest (None: no fit)
    growth_t0: float | None = None
    growth_t1: float | None = None
    #: the slope over the fit's last third (None: too few readings there)
    growth_recent_bytes_per_s: float | None = None
    #: the growth per timed call over the fit, and of which calls ("request" or "forward");
    #: None: fewer than MIN_CALLS calls in it, or no growth rate
    growth_per_call_bytes: float | None = None
    growth_calls: int | None = None
    growth_call_kind: str | None = None
    #: what grows in its heap, from its agent's object censuses (containers by bytes a
    #: second, then types by objects a second); empty: none grows, or no census
    growing: tuple[Growing, ...] = ()

    @property
    def growth_s(self) -> float | None:
        """How long the growth was measured over (past warm-up)."""
        if self.growth_t0 is None or self.growth_t1 is None:
            return None
        return self.growth_t1 - self.growth_t0

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


@dataclass(frozen=True, slots=True)
class GrowthFit:
    slope: float  # bytes/s
    r2: float
    t0: float  # the first and last reading fitted
    t1: float
    recent_slope: float | None  # over the last RECENT_SHARE of [t0, t1]; None: too few readings


def growth_fit(points: Sequence[tuple[float, int]]) -> GrowthFit | None:
    """RSS over time past warm-up, fitted: its slope, R², span and recent slope; None: too few
    points."""
    if not points:
        return None
    t0, t1 = points[0][0], points[-1][0]
    start = t0 + min(WARMUP_MAX_S, WARMUP_SHARE * (t1 - t0))
    fit = [(t, float(v)) for t, v in points if t >= start]
    if len(fit) < MIN_FIT_READINGS or fit[-1][0] - fit[0][0] < MIN_FIT_S:
        return None
    whole = _least_squares(fit)
    if whole is None:
        return None
    a, b = fit[0][0], fit[-1][0]
    tail = [(t, v) for t, v in fit if t >= b - RECENT_SHARE * (b - a)]
    recent = _least_squares(tail) if len(tail) >= MIN_RECENT_READINGS else None
    return GrowthFit(whole[0], whole[1], a, b, None if recent is None else recent[0])


def fit_growth(points: Sequence[tuple[float, int]]) -> tuple[float, float] | None:
    """(slope in bytes/s, R²) of RSS over time past warm-up; None: too few points."""
    g = growth_fit(points)
    return None if g is None else (g.slope, g.r2)


def _least_squares(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """(slope, R²) of the line through ``points``; None: one instant."""
    if not points:
        return None
    base = points[0][0]
    fit = [(t - base, v) for t, v in points]
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


#: a process's timed calls: which ("request" or "forward") and their ends, in order, and
#: since when they are known (a live session folds old spans; None: the whole session)
CallTimes = tuple[str, Sequence[float], float | None]


def call_times(
    spans: Iterable[StageSpan], pid_of: Callable[[int], int], since: float | None = None
) -> dict[int, CallTimes]:
    """Each process's timed calls among ``spans``: its requests (``infertop.stage(...,
    request=ID)``, each at its last span's end) where it has any, else its ``forward`` calls.
    ``pid_of``: a span's thread's process; ``since``: the spans are those since then (older
    ones were folded)."""
    forward: dict[int, list[float]] = {}
    requests: dict[int, dict[str, float]] = {}
    for sp in spans:
        pid = pid_of(sp.tid)
        if sp.request is not None:
            got = requests.setdefault(pid, {})
            got[sp.request] = max(got.get(sp.request, sp.t_end), sp.t_end)
        elif sp.stage == "forward":
            forward.setdefault(pid, []).append(sp.t_end)
    out: dict[int, CallTimes] = {}
    for pid, ends in forward.items():
        out[pid] = ("forward", sorted(ends), since)
    for pid, by_id in requests.items():
        out[pid] = ("request", sorted(by_id.values()), since)
    return out


def _per_call(
    fit: GrowthFit, calls: CallTimes | None
) -> tuple[float | None, int | None, str | None]:
    """(bytes per call, calls, kind) over the fit's span: the slope over the calls per second."""
    if calls is None:
        return None, None, None
    kind, ends, since = calls
    a = fit.t0 if since is None else max(fit.t0, since)
    lo, hi = bisect_left(ends, a), bisect_right(ends, fit.t1)
    n = hi - lo
    if n < MIN_CALLS or fit.t1 <= a:
        return None, None, None
    return fit.slope / (n / (fit.t1 - a)), n, kind


def _process(
    pid: int, rs: list[HostMemoryReading], calls: CallTimes | None = None
) -> ProcessMemory:
    with_rss = [r for r in rs if r.rss is not None]
    first, last = rs[0], rs[-1]
    dt = last.t - first.t
    recent = [r for r in rs if r.t >= last.t - RECENT_S]
    fit = growth_fit([(r.t, r.rss) for r in with_rss])  # type: ignore[misc]
    per_call, n_calls, call_kind = (None, None, None) if fit is None else _per_call(fit, calls)
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
        growth_bytes_per_s=None if fit is None else fit.slope,
        growth_r2=None if fit is None else fit.r2,
        cgroup=last.cgroup,
        oom_kills_during=max(0, kills[-1] - kills[0]) if kills else None,
        growth_t0=None if fit is None else fit.t0,
        growth_t1=None if fit is None else fit.t1,
        growth_recent_bytes_per_s=None if fit is None else fit.recent_slope,
        growth_per_call_bytes=per_call,
        growth_calls=n_calls,
        growth_call_kind=call_kind,
    )


def _rising(values: Sequence[int]) -> bool:
    """Rose between most of the pairs (RISING_SHARE) and between the last two."""
    pairs = list(zip(values, values[1:]))
    up = sum(1 for a, b in pairs if b > a)
    return bool(pairs) and pairs[-1][1] > pairs[-1][0] and up >= RISING_SHARE * len(pairs)


def growing_objects(censuses: Sequence[ObjectCensus]) -> tuple[Growing, ...]:
    """What grows over one process's censuses (in time order): its containers that keep
    growing, by estimated bytes a second, then its types whose instances keep growing."""
    if len(censuses) < MIN_CENSUSES or censuses[-1].t - censuses[0].t < MIN_CENSUS_S:
        return ()
    last = censuses[-1]
    series: dict[tuple[int, str], list[tuple[float, int, int | None, str | None]]] = {}
    for c in censuses:
        for key, kind, n, size, name in c.containers:
            series.setdefault((key, kind), []).append((c.t, n, size, name))
    held = {(key, kind) for key, kind, *_ in last.containers}
    boxes = []
    for (_key, kind), got in series.items():
        if (_key, kind) not in held or len(got) < MIN_CENSUSES:
            continue
        lengths = [n for _, n, _, _ in got]
        if lengths[-1] - lengths[0] < GROW_MIN_ITEMS or not _rising(lengths):
            continue
        dt = got[-1][0] - got[0][0]
        if dt <= 0:
            continue
        b0, b1 = got[0][2], got[-1][2]
        per_s = (lengths[-1] - lengths[0]) / dt
        bps = (b1 - b0) / dt if b0 is not None and b1 is not None else None
        name = next((nm for *_, nm in reversed(got) if nm), None)
        boxes.append(
            Growing("container", kind, name, lengths[0], lengths[-1], per_s, b1, bps, len(got))
        )
    boxes.sort(key=lambda g: -(g.bytes_per_s or 0.0))
    counts: dict[str, list[tuple[float, int]]] = {}
    for c in censuses:
        for tname, n in c.types:
            counts.setdefault(tname, []).append((c.t, n))
    kinds = []
    for tname, seen in counts.items():
        if len(seen) < MIN_CENSUSES or seen[-1][0] != last.t:
            continue
        ns = [n for _, n in seen]
        dt = seen[-1][0] - seen[0][0]
        if ns[-1] - ns[0] < GROW_MIN_OBJECTS or dt <= 0 or not _rising(ns):
            continue
        kinds.append(
            Growing(
                "objects", tname, None, ns[0], ns[-1], (ns[-1] - ns[0]) / dt, None, None, len(seen)
            )
        )
    kinds.sort(key=lambda g: -g.count_per_s)
    return tuple(boxes[:MAX_GROWING] + kinds[:MAX_GROWING])


def summarize_host_memory(
    readings: Sequence[HostMemoryReading],
    calls: Mapping[int, CallTimes] | Callable[[], Mapping[int, CallTimes]] | None = None,
    censuses: Mapping[int, Sequence[ObjectCensus]] | None = None,
) -> HostMemorySummary | None:
    """Each process's memory over ``readings``; None when no reading has an RSS. ``calls``:
    each process's timed calls (``call_times``), for its growth per call; a function is called
    only where some process's growth was fitted. ``censuses``: each process's object censuses
    (its agent's), in time order, for what grows."""
    by_pid: dict[int, list[HostMemoryReading]] = {}
    for r in readings:
        by_pid.setdefault(r.pid, []).append(r)
    procs = tuple(
        _process(pid, rs) for pid, rs in by_pid.items() if any(r.rss is not None for r in rs)
    )
    if calls is not None and any(p.growth_t0 is not None for p in procs):
        got = calls() if callable(calls) else calls
        procs = tuple(
            _process(p.pid, by_pid[p.pid], got.get(p.pid)) if p.pid in got else p for p in procs
        )
    if censuses:
        procs = tuple(
            replace(p, growing=growing_objects(censuses[p.pid])) if p.pid in censuses else p
            for p in procs
        )
    return HostMemorySummary(procs) if procs else None
