"""The report's ``gc``, ``event_loop`` and ``stages[i].tail`` objects (docs/report.md)."""

from __future__ import annotations

from typing import Any

from infertop.analysis.pauses import GcSummary, LoopLagSummary
from infertop.analysis.requests import RequestSummary
from infertop.analysis.shares import Latency
from infertop.analysis.tail import StageTail


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def gc_dict(gc: GcSummary | None) -> dict[str, Any] | None:
    """``count``: collections in total and by generation (a full collection is generation 2;
    each collection counts once, under the oldest generation it collected)."""
    if gc is None:
        return None
    return {
        "count": {"total": gc.count, **{str(gen): line.count for gen, line in gc.by_generation}},
        "total_s": _r(gc.total_ms / 1000.0, 4),
        "share": _r(gc.share, 5),
        "collected": gc.collected,
        "max_ms": _r(gc.max_ms),
        "long_pause_calls": None if gc.long_pause_calls is None else _r(gc.long_pause_calls, 5),
        "generations": [
            {"generation": gen, "count": line.count, "total_ms": _r(line.total_ms),
             "p50_ms": _r(line.p50_ms), "p99_ms": _r(line.p99_ms), "max_ms": _r(line.max_ms)}
            for gen, line in gc.by_generation
        ],  # fmt: skip
    }


def loop_dict(lag: LoopLagSummary | None) -> dict[str, Any] | None:
    if lag is None:
        return None
    return {
        "loops": lag.loops,
        "beats": lag.beats,
        "lag_ms": {"p50": _r(lag.p50_ms), "p99": _r(lag.p99_ms), "max": _r(lag.max_ms)},
    }


def tail_dict(tail: StageTail) -> dict[str, Any]:
    return {
        "threshold_ms": _r(tail.threshold_ms),
        "threshold": "given" if tail.threshold_given else "p99",
        "calls": tail.calls,
        "slow_calls": tail.slow_calls,
        "typical_calls": tail.typical_calls,
        "samples": {"slow": tail.slow_samples, "typical": tail.typical_samples},
        "frames": [
            {"name": f.function, "file": f.file, "line": f.line,
             "slow_share": _r(f.slow_share, 4), "typical_share": _r(f.typical_share, 4)}
            for f in tail.frames
        ],  # fmt: skip
        "overlaps": {k: None if v is None else _r(v, 4) for k, v in tail.overlaps.items()},
        "stages": {k: {"slow_share": _r(s, 4), "typical_share": _r(t, 4)} for k, (s, t) in tail.stages.items()},
        "slowest": [
            {"t": _r(c.t, 6), "duration_ms": _r(c.duration_ms), "thread": c.tid} for c in tail.slowest
        ],
    }


def latency_dict(lat: Latency) -> dict[str, float]:
    return {"p50": _r(lat.p50), "p95": _r(lat.p95), "p99": _r(lat.p99)}


def requests_dict(req: RequestSummary | None) -> dict[str, Any] | None:
    if req is None:
        return None
    lat = req.latency_ms
    return {
        "count": req.count,
        "per_s": None if req.per_s is None else _r(req.per_s, 2),
        "latency_ms": latency_dict(lat),
        "by_route": [
            {"route": r.route, "count": r.count, "latency_ms": latency_dict(r.latency_ms)}
            for r in req.by_route
        ],
        "stages": {k: {"share": _r(a, 4), "slowest_share": _r(b, 4)} for k, a, b in req.stage_shares},
        # each stage's time in a request (ids, or calls joined by time), over those that have it
        "joined": req.joined,
        "breakdown_ms": {st: {"p50": _r(p50), "p99": _r(p99)} for st, p50, p99 in req.breakdown_ms},
        "slowest": [
            {"id": r.id, "t": _r(r.t_start, 6), "duration_ms": _r(r.duration_ms),
             "stages": {st: _r(ms) for st, ms in r.stages}}
            for r in req.slowest
        ],  # fmt: skip
    }
