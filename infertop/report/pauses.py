"""The report's ``gc``, ``event_loop``, ``requests`` and ``stages[i].tail`` records
(``report/records.py``; docs/report.md)."""

from __future__ import annotations

from infertop.analysis.pauses import GcSummary, LoopLagSummary
from infertop.analysis.requests import RequestSummary
from infertop.analysis.shares import Latency
from infertop.analysis.tail import StageTail
from infertop.report import records


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def gc_record(gc: GcSummary | None) -> records.Gc | None:
    """``count``: collections in total and by generation (a full collection is generation 2;
    each collection counts once, under the oldest generation it collected)."""
    if gc is None:
        return None
    return records.Gc(
        count={"total": gc.count, **{str(gen): line.count for gen, line in gc.by_generation}},
        total_s=_r(gc.total_ms / 1000.0, 4),
        share=_r(gc.share, 5),
        collected=gc.collected,
        max_ms=_r(gc.max_ms),
        long_pause_calls=None if gc.long_pause_calls is None else _r(gc.long_pause_calls, 5),
        generations=[
            records.GcGeneration(gen, line.count, _r(line.total_ms), _r(line.p50_ms),
                                 _r(line.p99_ms), _r(line.max_ms))
            for gen, line in gc.by_generation
        ],  # fmt: skip
    )


def loop_record(lag: LoopLagSummary | None) -> records.EventLoop | None:
    if lag is None:
        return None
    return records.EventLoop(
        loops=lag.loops,
        beats=lag.beats,
        lag_ms=records.LagMs(_r(lag.p50_ms), _r(lag.p99_ms), _r(lag.max_ms)),
    )


def tail_record(tail: StageTail) -> records.Tail:
    return records.Tail(
        threshold_ms=_r(tail.threshold_ms),
        threshold="given" if tail.threshold_given else "p99",
        calls=tail.calls,
        slow_calls=tail.slow_calls,
        typical_calls=tail.typical_calls,
        samples=records.TailSamples(tail.slow_samples, tail.typical_samples),
        frames=[
            records.TailFrame(f.function, f.file, f.line, _r(f.slow_share, 4), _r(f.typical_share, 4))
            for f in tail.frames
        ],
        overlaps={k: None if v is None else _r(v, 4) for k, v in tail.overlaps.items()},
        stages={k: records.TailStage(_r(s, 4), _r(t, 4)) for k, (s, t) in tail.stages.items()},
        slowest=[records.SlowSpan(_r(c.t, 6), _r(c.duration_ms), c.tid) for c in tail.slowest],
    )


def latency_record(lat: Latency) -> records.Latency:
    return records.Latency(_r(lat.p50), _r(lat.p95), _r(lat.p99))


def requests_record(req: RequestSummary | None) -> records.Requests | None:
    if req is None:
        return None
    return records.Requests(
        count=req.count,
        per_s=None if req.per_s is None else _r(req.per_s, 2),
        latency_ms=latency_record(req.latency_ms),
        by_route=[
            records.Route(r.route, r.count, latency_record(r.latency_ms)) for r in req.by_route
        ],
        stages={k: records.RequestStage(_r(a, 4), _r(b, 4)) for k, a, b in req.stage_shares},
        # each stage's time in a request (ids, or calls joined by time), over those that have it
        joined=req.joined,
        breakdown_ms={st: records.P50P99(_r(p50), _r(p99)) for st, p50, p99 in req.breakdown_ms},
        slowest=[
            records.SlowRequest(r.id, _r(r.t_start, 6), _r(r.duration_ms),
                                {st: _r(ms) for st, ms in r.stages})
            for r in req.slowest
        ],  # fmt: skip
    )
