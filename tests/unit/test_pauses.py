"""GC pauses and event-loop lag summed for the report and findings (analysis/pauses.py), and
the same totals from a bounded live session that folded them."""

from __future__ import annotations

import pytest

from infertop.analysis.pauses import PauseFold, summarize_pauses
from infertop.analysis.session import Session
from infertop.analysis.session_tails import session_pauses
from infertop.model.events import GcPause, LoopLag, StageSpan


def pauses(n: int = 40, every: float = 0.5) -> list[GcPause]:
    """``n`` full collections of 20 ms every ``every`` s, and a young one of 1 ms beside each."""
    out = []
    for i in range(n):
        t = 1000.0 + i * every
        out.append(GcPause(t, t + 0.020, 2, 100, 7))
        out.append(GcPause(t + 0.1, t + 0.101, 0, 3, 7))
    return out


def test_collections_by_generation_and_as_a_share_of_wall_time() -> None:
    s = summarize_pauses(pauses(), [], PauseFold(), duration_s=20.0)
    g = s.gc
    assert g is not None and g.count == 80 and g.collected == 40 * 103
    by_gen = dict(g.by_generation)
    assert by_gen[2].count == 40 and by_gen[2].p50_ms == pytest.approx(20.0, rel=0.01)
    assert by_gen[0].count == 40 and by_gen[0].max_ms == pytest.approx(1.0, rel=0.01)
    assert g.total_ms == pytest.approx(40 * 21.0, rel=1e-6)
    assert g.share == pytest.approx(0.840 / 20.0)
    assert g.max_ms == pytest.approx(20.0, rel=1e-6)
    assert s.event_loop is None and s.gil_share is None
    assert summarize_pauses([], [], PauseFold(), 10.0).gc is None


def test_long_pauses_are_counted_against_the_calls_they_land_in() -> None:
    long = [GcPause(1000.0, 1000.15, 2, 1, 7)]  # 150 ms
    calls = [StageSpan(7, "forward", 999.9 + i * 0.1, 999.95 + i * 0.1) for i in range(100)]
    g = summarize_pauses(long, [], PauseFold(), 10.0, calls).gc
    # the calls over 1000.0..1000.15: those starting at 999.9+0.1*i for i = 1, 2 (and not 0, 3)
    assert g is not None and g.long_pause_calls == pytest.approx(0.02)
    short = summarize_pauses(pauses(2), [], PauseFold(), 10.0, calls).gc
    assert short is not None and short.long_pause_calls == 0.0


def test_loop_lag_percentiles() -> None:
    lags = [LoopLag(1000.0 + i * 0.1, 0.0002, 8) for i in range(99)] + [LoopLag(1010.0, 0.08, 8)]
    lag = summarize_pauses([], lags, PauseFold(), 10.0).event_loop
    assert lag is not None and lag.beats == 100 and lag.loops == 1
    assert lag.p50_ms == pytest.approx(0.2, rel=0.02) and lag.max_ms == pytest.approx(80.0)
    assert lag.p99_ms > 0.2


def test_a_bounded_session_folds_pauses_without_losing_them() -> None:
    bounded, full = Session(retain_s=5.0), Session()
    lags = [LoopLag(1000.0 + i * 0.1, 0.001 * (i % 7), 8) for i in range(200)]
    for ev in sorted([*pauses(), *lags], key=lambda e: getattr(e, "t_end", getattr(e, "t", 0))):
        bounded.apply(ev)
        full.apply(ev)
    assert len(bounded.gc_pauses) < 40 and len(bounded.loop_lags) < 100  # folded past 5 s
    a, b = session_pauses(bounded, None, 20.0), session_pauses(full, None, 20.0)
    assert a.gc is not None and b.gc is not None
    assert (a.gc.count, a.gc.collected) == (b.gc.count, b.gc.collected)
    assert a.gc.total_ms == pytest.approx(b.gc.total_ms)
    assert a.gc.share == pytest.approx(b.gc.share)
    assert dict(a.gc.by_generation)[2].p99_ms == pytest.approx(dict(b.gc.by_generation)[2].p99_ms, rel=0.01)
    assert a.event_loop is not None and b.event_loop is not None
    assert a.event_loop.beats == b.event_loop.beats == 200
    assert a.event_loop.max_ms == pytest.approx(b.event_loop.max_ms)
