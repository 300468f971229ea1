"""The session's per-stage span durations (kept sorted as spans arrive, so a snapshot of a long
live session does not re-read every span) give exactly what reading the spans gives."""

from __future__ import annotations

import random

from infertop.analysis.session import Session
from infertop.analysis.shares import stage_shares
from infertop.analysis.snapshot import build_snapshot
from infertop.model.events import StageSpan

T0 = 1_700_000_000.0
STAGES = ("preprocess", "forward", "serialize", "my-stage")


def spans(rng: random.Random, n: int, start: float) -> list[StageSpan]:
    out = []
    for _ in range(n):
        t = start + rng.uniform(0, 10)
        out.append(StageSpan(rng.randrange(3), rng.choice(STAGES), t, t + rng.expovariate(50)))
    return out  # not in time order, as batches from several threads arrive


def from_the_spans(session: Session, t: float | None) -> list:
    return stage_shares({}, 100.0, session.spans_between(None, t), 10.0)


def test_live_snapshots_match_reading_every_span() -> None:
    rng = random.Random(4)
    s = Session()
    for batch in range(5):  # snapshots between batches: the kept lists re-sort each time
        for sp in spans(rng, 400, T0 + 10 * batch):
            s.apply(sp)
        snap = build_snapshot(s)
        durations = s.span_durations(None)
        assert durations is not None
        assert stage_shares({}, 100.0, (), 10.0, durations) == from_the_spans(s, None)
        latency = {x.name: (x.calls, x.latency_ms) for x in snap.totals}
        expected = stage_shares({}, 100.0, s.spans, snap.duration_s)
        assert latency == {x.name: (x.calls, x.latency_ms) for x in expected}


def test_a_playhead_before_the_last_span_reads_the_spans() -> None:
    rng = random.Random(5)
    s = Session()
    for sp in spans(rng, 300, T0):
        s.apply(sp)
    t = T0 + 5
    assert s.span_durations(t) is None  # some spans end after t: they must not count
    snap = build_snapshot(s, t=t)
    calls = {x.name: x.calls for x in snap.totals if x.calls}
    assert calls == {x.name: x.calls for x in from_the_spans(s, t) if x.calls}
    assert sum(calls.values()) == sum(1 for sp in s.spans if sp.t_end <= t) < len(s.spans)
