"""Garbage-collection pauses and event-loop lag, summed for the report, the findings and the
UI (the agent's ``GcPause`` / ``LoopLag`` events; docs/report.md, ``gc`` and ``event_loop``).

A bounded live session folds old pauses into ``PauseFold`` (histograms, counts, totals), so the
whole-session numbers stay whole while memory stops growing.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from infertop.analysis.latency_sketch import DurationHistogram
from infertop.model.events import GcPause, LoopLag, StageSpan

#: a pause this long is one a request notices (the ``gc-pauses`` finding's second test)
LONG_GC_PAUSE_MS = 100.0


@dataclass
class PauseStats:
    """Running totals of one kind of pause (ms): count, total, longest and a histogram."""

    n: int = 0
    total_ms: float = 0.0
    max_ms: float = 0.0
    hist: DurationHistogram = field(default_factory=DurationHistogram)

    def add(self, ms: Sequence[float]) -> None:
        if ms:
            self.n += len(ms)
            self.total_ms += sum(ms)
            self.max_ms = max(self.max_ms, max(ms))
            self.hist.add_many(ms)


@dataclass(frozen=True)
class PauseLine:
    """One generation's collections, or one process's loop lag: count and pause sizes (ms)."""

    count: int
    total_ms: float
    p50_ms: float
    p99_ms: float
    max_ms: float


def _line(folded: PauseStats | None, exact: Sequence[float]) -> PauseLine | None:
    ordered = sorted(exact)
    folded = folded or PauseStats()
    got = folded.hist.latency(ordered)
    if got is None:
        return None
    n, lat = got
    return PauseLine(
        n, folded.total_ms + sum(ordered), lat.p50, lat.p99, max(folded.max_ms, ordered[-1] if ordered else 0.0)
    )


@dataclass
class PauseFold:
    """The pauses a bounded session no longer keeps one by one."""

    gc: dict[int, PauseStats] = field(default_factory=dict)  # by generation
    gc_collected: int = 0
    gc_ms_by_pid: dict[int, float] = field(default_factory=dict)
    lag: PauseStats = field(default_factory=PauseStats)

    def add_gc(self, pauses: Iterable[GcPause]) -> None:
        by_gen: dict[int, list[float]] = {}
        for p in pauses:
            ms = (p.t_end - p.t_start) * 1000.0
            by_gen.setdefault(p.generation, []).append(ms)
            self.gc_collected += p.collected
            self.gc_ms_by_pid[p.pid] = self.gc_ms_by_pid.get(p.pid, 0.0) + ms
        for gen, ms_list in by_gen.items():
            self.gc.setdefault(gen, PauseStats()).add(ms_list)

    def add_lags(self, lags: Iterable[LoopLag]) -> None:
        self.lag.add([x.lag_s * 1000.0 for x in lags])


@dataclass(frozen=True)
class GcSummary:
    """Every collection up to a moment: by generation, in total, and as a share of wall time
    (the busiest process's, with several)."""

    by_generation: tuple[tuple[int, PauseLine], ...]
    count: int
    total_ms: float
    collected: int
    share: float  # of the session's wall time spent collecting
    max_ms: float
    #: the share of stage calls that overlapped a pause of at least LONG_GC_PAUSE_MS
    long_pause_calls: float | None


@dataclass(frozen=True)
class LoopLagSummary:
    beats: int
    loops: int  # event-loop threads seen
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True)
class PauseSummary:
    gc: GcSummary | None
    event_loop: LoopLagSummary | None
    #: the share of wall time the target's threads waited for the GIL, GIL_LATE_S or more at a
    #: stretch (held by a C call that keeps it; the agent's ``gil_waits``): the busiest
    #: process's; None: the call sampler did not run
    gil_share: float | None = None


def summarize_pauses(
    gc: Sequence[GcPause],
    lags: Sequence[LoopLag],
    fold: PauseFold,
    duration_s: float,
    spans: Sequence[StageSpan] = (),
    gil_waits_s: Sequence[float] | None = None,
) -> PauseSummary:
    """``gil_waits_s``: each process's time in GIL waits (None: not measured)."""
    gil = None
    if gil_waits_s is not None and duration_s > 0:
        gil = min(1.0, max(gil_waits_s, default=0.0) / duration_s)
    return PauseSummary(_gc_summary(gc, fold, duration_s, spans), _lag_summary(lags, fold), gil)


def _gc_summary(
    gc: Sequence[GcPause], fold: PauseFold, duration_s: float, spans: Sequence[StageSpan]
) -> GcSummary | None:
    exact: dict[int, list[float]] = {}
    by_pid = dict(fold.gc_ms_by_pid)
    for p in gc:
        ms = (p.t_end - p.t_start) * 1000.0
        exact.setdefault(p.generation, []).append(ms)
        by_pid[p.pid] = by_pid.get(p.pid, 0.0) + ms
    lines = []
    for gen in sorted(set(exact) | set(fold.gc)):
        line = _line(fold.gc.get(gen), exact.get(gen, ()))
        if line is not None:
            lines.append((gen, line))
    if not lines:
        return None
    total = sum(line.total_ms for _, line in lines)
    share = max(by_pid.values()) / 1000.0 / duration_s if duration_s > 0 else 0.0
    return GcSummary(
        by_generation=tuple(lines),
        count=sum(line.count for _, line in lines),
        total_ms=total,
        collected=fold.gc_collected + sum(p.collected for p in gc),
        share=min(1.0, share),
        max_ms=max(line.max_ms for _, line in lines),
        long_pause_calls=_calls_hit(spans, [p for p in gc if (p.t_end - p.t_start) * 1000.0 >= LONG_GC_PAUSE_MS]),
    )


def _calls_hit(spans: Sequence[StageSpan], pauses: Sequence[GcPause]) -> float | None:
    """The share of ``spans`` that overlap one of ``pauses`` (a collection stops every thread of
    its process; with several processes, a pause counts for all: thread ids do not say whose
    process a span is of everywhere); None without spans."""
    if not spans:
        return None
    if not pauses:
        return 0.0
    ordered = sorted(pauses, key=lambda p: p.t_start)
    starts = [p.t_start for p in ordered]
    ends_max = []  # the latest end among pauses [0, i], for the overlap test
    latest = float("-inf")
    for p in ordered:
        latest = max(latest, p.t_end)
        ends_max.append(latest)
    hit = 0
    for sp in spans:
        i = bisect.bisect_left(starts, sp.t_end)  # pauses that start before the call ends
        if i and ends_max[i - 1] > sp.t_start:
            hit += 1
    return hit / len(spans)


def _lag_summary(lags: Sequence[LoopLag], fold: PauseFold) -> LoopLagSummary | None:
    line = _line(fold.lag, [x.lag_s * 1000.0 for x in lags])
    if line is None:
        return None
    return LoopLagSummary(
        beats=line.count,
        loops=len({x.tid for x in lags}) or 1,
        p50_ms=line.p50_ms,
        p99_ms=line.p99_ms,
        max_ms=line.max_ms,
    )
