"""Tail attribution: where a stage's slow calls spent their time *differently* from its typical
ones (docs/stages.md, "The tail").

The agent's call sampler takes the stacks of the threads inside stage calls, each with its time
(``CallSamples``); here they are joined to the stage's spans (same thread, inside the call). A
stage's calls split into typical (at most its p50) and slow (at least its p99, or a threshold
the user gives); for every frame, the share of slow-call samples whose stack holds it against
the same share in typical calls. Frames that only the slow calls have come first. What the slow
calls overlapped is said too, as shares of their time: garbage collections, the GIL (the
agent's thread kept from running for ``GIL_LATE_S`` or more: a C call that keeps the GIL, or a
CPU too busy), waiting in a queue, host-device syncs, infertop's own profiler windows, and
memory pressure (``memory``: the seconds between two host memory readings of the process in
which it took major page faults, swap-ins among them, at ``FAULTING_PER_S`` or more, or its
memory cgroup's tasks stalled on memory ``STALLED_SHARE`` of the time or more; read from
``/proc`` and the cgroup outside the target, so no agent is needed). The typical calls' share
of memory pressure is kept beside it (``typical_memory``): pressure that every call sees does
not explain the slow ones.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from infertop.analysis.shares import percentile
from infertop.model.events import CallSamples, Frame, StageSpan
from infertop.model.host_memory import HostMemoryReading

OVERLAPS = ("gc", "gil", "queue", "sync", "profiler", "memory")
#: major faults a second between two readings: the process is faulting. One in a reading's
#: second counts: a fault reads ahead, so a few stand for megabytes (a 32 MB memory-mapped file
#: reclaimed from a process cost its next full read 1-2 major faults and 22-28 ms; at rest, none)
FAULTING_PER_S = 0.5
STALLED_SHARE = 0.05  # its cgroup's tasks stalled on memory this share of the time (PSI some)
TOP_TAIL_FRAMES = 10
SLOWEST_CALLS = 10


class IntervalSet:
    """Intervals merged into disjoint ones, answering "how much of [a, b] do they cover"."""

    def __init__(self, intervals: Iterable[tuple[float, float]] = ()) -> None:
        merged: list[list[float]] = []
        for a, b in sorted((a, b) for a, b in intervals if b > a):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]
        self.before: list[float] = []  # covered length of the intervals before i
        total = 0.0
        for a, b in merged:
            self.before.append(total)
            total += b - a
        self.total = total

    def _covered_upto(self, x: float) -> float:
        i = bisect.bisect_right(self.starts, x)
        if not i:
            return 0.0
        return self.before[i - 1] + min(x, self.ends[i - 1]) - self.starts[i - 1]

    def overlap(self, a: float, b: float) -> float:
        if not self.starts or b <= a:
            return 0.0
        return self._covered_upto(b) - self._covered_upto(a)


@dataclass
class CallSampleIndex:
    """Call samples by thread, ordered by time, for joining to calls; and the GIL waits the
    sampler saw, by process."""

    rate_hz: float = 0.0
    times: dict[int, list[float]] = field(default_factory=dict)
    stacks: dict[int, list[int]] = field(default_factory=dict)
    gil_waits: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    n: int = 0
    _sorted: bool = True

    def add(self, ev: CallSamples) -> None:
        self.rate_hz = ev.rate_hz or self.rate_hz
        for tid, t, sid in ev.samples:
            ts = self.times.setdefault(tid, [])
            if ts and t < ts[-1]:
                self._sorted = False
            ts.append(t)
            self.stacks.setdefault(tid, []).append(sid)
        self.n += len(ev.samples)
        if ev.gil_waits:
            self.gil_waits.setdefault(ev.pid, []).extend(ev.gil_waits)

    def order(self) -> None:
        """Put each thread's samples in time order (batches from threads may interleave)."""
        if self._sorted:
            return
        for tid, ts in self.times.items():
            order = sorted(range(len(ts)), key=ts.__getitem__)
            self.times[tid] = [ts[i] for i in order]
            sids = self.stacks[tid]
            self.stacks[tid] = [sids[i] for i in order]
        self._sorted = True

    def within(self, tid: int, t0: float, t1: float) -> list[int]:
        """The stack ids sampled on ``tid`` in [t0, t1]."""
        self.order()
        ts = self.times.get(tid)
        if not ts:
            return []
        return self.stacks[tid][bisect.bisect_left(ts, t0) : bisect.bisect_right(ts, t1)]

    def drop_before(self, t: float) -> None:
        self.order()
        for tid, ts in list(self.times.items()):
            k = bisect.bisect_left(ts, t)
            if k:
                del ts[:k]
                del self.stacks[tid][:k]
                self.n -= k
            if not ts:
                del self.times[tid]
                del self.stacks[tid]
        for pid, waits in self.gil_waits.items():
            self.gil_waits[pid] = [w for w in waits if w[1] >= t]


@dataclass(frozen=True)
class TailFrame:
    function: str
    file: str
    line: int  # the line the slow calls' samples were on most
    slow_share: float
    typical_share: float

    @property
    def excess(self) -> float:
        return self.slow_share - self.typical_share


@dataclass(frozen=True)
class SlowCall:
    t: float  # unix start
    duration_ms: float
    tid: int


@dataclass(frozen=True)
class StageTail:
    stage: str
    threshold_ms: float
    threshold_given: bool  # --slow STAGE=MS, not the p99
    calls: int
    slow_calls: int
    typical_calls: int
    p50_ms: float
    slow_samples: int
    typical_samples: int
    frames: tuple[TailFrame, ...]  # by excess, largest first
    overlaps: dict[str, float | None]  # shares of slow-call time; None: not measured
    slowest: tuple[SlowCall, ...]
    #: the slow and the typical calls' samples by the stage their stacks are in (shares): the
    #: stage breakdown of the slow calls (of a request: where the slow requests' time went)
    stages: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: the stacks of the slow and the typical calls' samples (stack id -> samples), for the
    #: differential flame of the tail view
    slow_stacks: dict[int, int] = field(default_factory=dict, compare=False)
    typical_stacks: dict[int, int] = field(default_factory=dict, compare=False)
    #: the typical calls' share of time under memory pressure (``overlaps["memory"]`` is the
    #: slow calls'); None: no host memory read
    typical_memory: float | None = None


@dataclass(frozen=True)
class TailInputs:
    """What tail attribution reads besides a stage's spans."""

    samples: CallSampleIndex
    frames_of: Callable[[int], Sequence[Frame]]
    stage_of: Callable[[int], str]
    pid_of: Callable[[int], int]  # a thread's process (0: the target)
    gc: dict[int, IntervalSet]  # collections by process
    profiler: dict[int, IntervalSet]  # infertop's torch.profiler windows by process
    sampled: bool  # the agent's call sampler ran (else frames and sample-based overlaps: None)
    #: memory pressure by process (``memory_pressure``); None: no host memory was read
    memory: dict[int, IntervalSet] | None = None


def memory_pressure(
    readings: Iterable[HostMemoryReading], key: Callable[[int], int] = lambda pid: pid
) -> dict[int, IntervalSet]:
    """By process (``key`` of its pid), the intervals between two of its host memory readings
    (in order) in which it was under memory pressure: major faults at ``FAULTING_PER_S`` or
    more, or its cgroup's PSI ``some`` at ``STALLED_SHARE`` of the interval or more."""
    last: dict[int, HostMemoryReading] = {}
    out: dict[int, list[tuple[float, float]]] = {}
    for r in readings:
        a = last.get(r.pid)
        last[r.pid] = r
        dt = r.t - a.t if a is not None else 0.0
        if a is None or dt <= 0:
            continue
        faulting = (
            a.major_faults is not None
            and r.major_faults is not None
            and r.major_faults - a.major_faults >= FAULTING_PER_S * dt
        )
        ca, cb = a.cgroup, r.cgroup
        stalled = (
            ca is not None
            and cb is not None
            and ca.path == cb.path
            and ca.pressure_some_us is not None
            and cb.pressure_some_us is not None
            and cb.pressure_some_us - ca.pressure_some_us >= STALLED_SHARE * dt * 1e6
        )
        if faulting or stalled:
            out.setdefault(key(r.pid), []).append((a.t, r.t))
    return {pid: IntervalSet(iv) for pid, iv in out.items()}


#: the injected agent's own code (on Python 3.10/3.11 its wrapper around each timed call is on
#: every such call's stack): never one of the frames a stage's slow calls "have more of"
AGENT_FILE = "<infertop-agent>"


def _shares(counts: dict[int, int], frames_of: Callable[[int], Sequence[Frame]]):
    """{(function, file): samples whose stack holds it}, {(function, file): {line: n}} and
    {(function, file): its deepest position in a stack}; the agent's own frames left out."""
    held: dict[tuple[str, str], int] = {}
    lines: dict[tuple[str, str], dict[int, int]] = {}
    depth: dict[tuple[str, str], int] = {}
    for sid, n in counts.items():
        seen = set()
        for i, f in enumerate(frames_of(sid)):
            if f.file == AGENT_FILE:
                continue
            key = (f.function, f.file)
            by_line = lines.setdefault(key, {})
            by_line[f.line] = by_line.get(f.line, 0) + n
            depth[key] = max(depth.get(key, 0), i)
            if key not in seen:
                seen.add(key)
                held[key] = held.get(key, 0) + n
    return held, lines, depth


def stage_tail(
    stage: str, spans: Sequence[StageSpan], inputs: TailInputs, threshold_ms: float | None = None
) -> StageTail | None:
    """The tail of one stage's calls, or None without calls."""
    calls = [sp for sp in spans if sp.stage == stage]
    if not calls:
        return None
    durations = sorted((sp.t_end - sp.t_start) * 1000.0 for sp in calls)
    p50 = percentile(durations, 50)
    given = threshold_ms is not None
    threshold = float(threshold_ms) if threshold_ms is not None else percentile(durations, 99)
    slow = [sp for sp in calls if (sp.t_end - sp.t_start) * 1000.0 >= threshold]
    typical = [sp for sp in calls if (sp.t_end - sp.t_start) * 1000.0 <= p50]
    slow_stacks = _sampled(slow, inputs.samples)
    typical_stacks = _sampled(typical, inputs.samples)
    n_slow, n_typical = sum(slow_stacks.values()), sum(typical_stacks.values())
    frames: list[TailFrame] = []
    if n_slow:
        held_slow, lines, depth = _shares(slow_stacks, inputs.frames_of)
        held_typ, _, _ = _shares(typical_stacks, inputs.frames_of)
        for key, n in held_slow.items():
            s = n / n_slow
            t = held_typ.get(key, 0) / n_typical if n_typical else 0.0
            if s > t:
                by_line = lines[key]
                frames.append(TailFrame(key[0], key[1], max(by_line, key=by_line.__getitem__), s, t))
        frames = _without_pass_through(frames, slow_stacks, inputs.frames_of)
        # the deepest frame, the one that does the work, comes first among equals
        frames.sort(key=lambda f: (-round(f.excess, 9), -depth[(f.function, f.file)], f.function))
    slowest = sorted(slow, key=lambda sp: sp.t_start - sp.t_end)[:SLOWEST_CALLS]
    return StageTail(
        stage=stage,
        threshold_ms=threshold,
        threshold_given=given,
        calls=len(calls),
        slow_calls=len(slow),
        typical_calls=len(typical),
        p50_ms=p50,
        slow_samples=n_slow,
        typical_samples=n_typical,
        frames=tuple(frames[:TOP_TAIL_FRAMES]),
        overlaps=_overlaps(slow, slow_stacks, inputs),
        typical_memory=None if inputs.memory is None else _covered(typical, inputs.memory, inputs),
        slowest=tuple(SlowCall(sp.t_start, (sp.t_end - sp.t_start) * 1000.0, sp.tid) for sp in slowest),
        stages=_stage_breakdown(slow_stacks, typical_stacks, inputs.stage_of),
        slow_stacks=slow_stacks,
        typical_stacks=typical_stacks,
    )


#: a caller whose callees hold this much of its excess is only the way to them: left out
PASS_THROUGH = 0.95


def _without_pass_through(
    frames: list[TailFrame], slow: dict[int, int], frames_of: Callable[[int], Sequence[Frame]]
) -> list[TailFrame]:
    """The frames less the callers whose excess their callees hold (the chain of middleware and
    dispatch above the function that differs: its excess is theirs too). What is left are the
    frames that differ themselves: a caller stays when part of its excess is its own."""
    excess = {(f.function, f.file): f.excess for f in frames}
    callees: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for sid in slow:
        stack = [(f.function, f.file) for f in frames_of(sid)]
        for parent, child in zip(stack, stack[1:]):
            if parent in excess and child in excess and child != parent:
                callees.setdefault(parent, set()).add(child)
    keep = []
    for f in frames:
        key = (f.function, f.file)
        below = sum(excess[c] for c in callees.get(key, ()))
        if below < PASS_THROUGH * f.excess:
            keep.append(f)
    return keep


def _sampled(calls: Sequence[StageSpan], samples: CallSampleIndex) -> dict[int, int]:
    """Stack id -> samples, over the samples taken on each call's thread inside the call. A
    sample inside two calls of the stage (a call nested in another) counts once."""
    out: dict[int, int] = {}
    seen: set[tuple[int, float]] = set()
    samples.order()
    for sp in calls:
        ts = samples.times.get(sp.tid)
        if not ts:
            continue
        lo = bisect.bisect_left(ts, sp.t_start)
        hi = bisect.bisect_right(ts, sp.t_end)
        sids = samples.stacks[sp.tid]
        for i in range(lo, hi):
            key = (sp.tid, ts[i])
            if key in seen:
                continue
            seen.add(key)
            out[sids[i]] = out.get(sids[i], 0) + 1
    return out


def _stage_breakdown(
    slow: dict[int, int], typical: dict[int, int], stage_of: Callable[[int], str]
) -> dict[str, tuple[float, float]]:
    """{stage: (share of slow-call samples, share of typical-call samples)}, largest slow first."""

    def shares(counts: dict[int, int]) -> dict[str, float]:
        total = sum(counts.values())
        out: dict[str, float] = {}
        for sid, n in counts.items():
            st = stage_of(sid)
            out[st] = out.get(st, 0.0) + n / total
        return out

    s, t = (shares(slow) if slow else {}), (shares(typical) if typical else {})
    names = sorted(set(s) | set(t), key=lambda k: (-s.get(k, 0.0), k))
    return {k: (s.get(k, 0.0), t.get(k, 0.0)) for k in names}


def _covered(
    calls: Sequence[StageSpan], sets: dict[int, IntervalSet], inputs: TailInputs
) -> float | None:
    """The share of the calls' time that intervals of their process cover; None: no time."""
    span_s = sum(sp.t_end - sp.t_start for sp in calls)
    if not span_s:
        return None
    total = 0.0
    for sp in calls:
        s = sets.get(inputs.pid_of(sp.tid))
        if s is not None:
            total += s.overlap(sp.t_start, sp.t_end)
    return min(1.0, total / span_s)


def _overlaps(
    slow: Sequence[StageSpan], slow_stacks: dict[int, int], inputs: TailInputs
) -> dict[str, float | None]:
    def covered(sets: dict[int, IntervalSet]) -> float | None:
        return _covered(slow, sets, inputs)

    gil = {pid: IntervalSet(w) for pid, w in inputs.samples.gil_waits.items()}
    n = sum(slow_stacks.values())
    by_stage: dict[str, int] = {}
    for sid, k in slow_stacks.items():
        st = inputs.stage_of(sid)
        by_stage[st] = by_stage.get(st, 0) + k
    sampled = inputs.sampled and n > 0
    return {
        "gc": covered(inputs.gc),
        "gil": covered(gil) if inputs.sampled else None,
        "queue": by_stage.get("queue", 0) / n if sampled else None,
        "sync": by_stage.get("sync", 0) / n if sampled else None,
        "profiler": covered(inputs.profiler),
        "memory": None if inputs.memory is None else covered(inputs.memory),
    }
