"""Tail attribution on synthetic calls and samples: which frames the slow calls have more of,
what they overlapped, and how samples are joined to calls (analysis/tail.py)."""

from __future__ import annotations

import pytest

from infertop.analysis.tail import CallSampleIndex, IntervalSet, TailInputs, stage_tail
from infertop.model.events import CallSamples, Frame, StageSpan

MAIN = Frame("main", "/srv/app.py", 10)
ENCODE = Frame("encode", "/srv/tok.py", 20)
COMMON = Frame("common_path", "/srv/tok.py", 30)
RARE = Frame("rare_path", "/srv/tok.py", 40)
WAIT = Frame("Queue.get", "/usr/lib/python3.12/queue.py", 171)
STACKS = {0: [MAIN, ENCODE, COMMON], 1: [MAIN, ENCODE, RARE], 2: [MAIN, ENCODE, WAIT]}


def inputs(samples: CallSampleIndex, gc=(), profiler=(), stage_of=None) -> TailInputs:
    return TailInputs(
        samples=samples,
        frames_of=STACKS.__getitem__,
        stage_of=stage_of or (lambda sid: "queue" if sid == 2 else "preprocess"),
        pid_of=lambda tid: 0,
        gc={0: IntervalSet(gc)},
        profiler={0: IntervalSet(profiler)},
        sampled=samples.n > 0,
    )


def workload(slow_stack: int = 1) -> tuple[list[StageSpan], CallSampleIndex]:
    """100 calls of 5 ms on thread 7 (common path), then 2 of 40 ms (``slow_stack``), sampled
    every millisecond inside each call."""
    spans, rows = [], []
    t = 1000.0
    for i in range(102):
        ms = 40.0 if i >= 100 else 5.0
        spans.append(StageSpan(7, "preprocess", t, t + ms / 1000))
        sid = slow_stack if i >= 100 else 0
        rows += [(7, t + k / 1000 + 0.0005, sid) for k in range(int(ms))]
        t += ms / 1000 + 0.010
    idx = CallSampleIndex()
    idx.add(CallSamples(1000.0, tuple(rows)))
    return spans, idx


def test_interval_set_merges_and_measures_overlap() -> None:
    s = IntervalSet([(5, 7), (0, 2), (1, 3), (10, 10)])  # (0,3) and (5,7); the empty one dropped
    assert s.total == pytest.approx(5)
    assert s.overlap(2, 6) == pytest.approx(2)  # 2..3 and 5..6
    assert s.overlap(-5, 100) == pytest.approx(5)
    assert s.overlap(3, 5) == 0.0 and s.overlap(8, 9) == 0.0
    assert IntervalSet().overlap(0, 1) == 0.0


def test_the_rare_path_of_the_slow_calls_comes_first() -> None:
    spans, idx = workload()
    tail = stage_tail("preprocess", spans, inputs(idx))
    assert tail is not None
    assert (tail.calls, tail.slow_calls) == (102, 2)  # the p99 falls between 5 and 40 ms
    assert 5.0 < tail.threshold_ms < 40.0 and not tail.threshold_given
    assert tail.typical_calls == 100  # every 5 ms call is at or under the p50 (5 ms)
    assert tail.slow_samples == 80 and tail.typical_samples == 500
    first = tail.frames[0]
    assert (first.function, first.line, first.slow_share, first.typical_share) == ("rare_path", 40, 1.0, 0.0)
    # frames both kinds of call have (main, encode) are not "different": not listed
    assert {f.function for f in tail.frames} == {"rare_path"}
    assert [c.duration_ms for c in tail.slowest] == pytest.approx([40.0, 40.0])
    assert tail.slowest[0].tid == 7


def test_overlaps_are_shares_of_slow_call_time() -> None:
    spans, idx = workload()
    slow0 = spans[100]
    gc = [(slow0.t_start, slow0.t_start + 0.020)]  # half of one of the two slow calls
    prof = [(slow0.t_start - 0.001, slow0.t_end + 0.001)]  # our profiler window over that call
    tail = stage_tail("preprocess", spans, inputs(idx, gc=gc, profiler=prof))
    assert tail is not None
    assert tail.overlaps["gc"] == pytest.approx(0.25)
    assert tail.overlaps["profiler"] == pytest.approx(0.5)
    assert tail.overlaps["gil"] == 0.0 and tail.overlaps["sync"] == 0.0
    # slow calls waiting in a queue: every slow sample is in Queue.get
    spans, idx = workload(slow_stack=2)
    tail = stage_tail("preprocess", spans, inputs(idx))
    assert tail is not None and tail.overlaps["queue"] == pytest.approx(1.0)
    assert tail.frames[0].function == "Queue.get"
    # the stage breakdown: the slow calls all queue, the typical ones all preprocess
    assert tail.stages == {"queue": (1.0, 0.0), "preprocess": (0.0, 1.0)}


def test_a_given_threshold_replaces_the_p99() -> None:
    spans, idx = workload()
    tail = stage_tail("preprocess", spans, inputs(idx), threshold_ms=4.0)
    assert tail is not None and tail.threshold_given and tail.slow_calls == 102
    # every call is slow now: the rare path is 80 of the 580 slow samples
    assert tail.frames[0].function == "rare_path"
    assert tail.frames[0].slow_share == pytest.approx(80 / 580)
    assert stage_tail("forward", spans, inputs(idx)) is None  # no calls of that stage


def test_without_call_samples_the_tail_still_has_its_calls() -> None:
    spans, _ = workload()
    tail = stage_tail("preprocess", spans, inputs(CallSampleIndex()))
    assert tail is not None and tail.slow_calls == 2 and tail.frames == ()
    assert tail.overlaps["gil"] is None and tail.overlaps["queue"] is None
    assert tail.overlaps["gc"] == 0.0  # GC pauses need no samples


def test_samples_of_another_thread_or_outside_the_call_are_not_its_own() -> None:
    spans = [StageSpan(7, "s", 10.0, 10.1), StageSpan(7, "s", 11.0, 11.001)]
    idx = CallSampleIndex()
    # out of order across batches, another thread inside the call's time, one after it
    idx.add(CallSamples(100.0, ((7, 10.05, 1), (8, 10.05, 0))))
    idx.add(CallSamples(100.0, ((7, 10.02, 1), (7, 10.2, 0))))
    tail = stage_tail("s", spans, inputs(idx))
    assert tail is not None and tail.slow_samples == 2  # thread 7's two inside 10.0..10.1
    idx.drop_before(10.03)
    assert idx.n == 3 and idx.within(7, 10.0, 10.1) == [1]


def test_a_nested_call_of_the_same_stage_counts_its_samples_once() -> None:
    outer, inner = StageSpan(7, "s", 10.0, 10.1), StageSpan(7, "s", 10.01, 10.09)
    idx = CallSampleIndex()
    idx.add(CallSamples(100.0, tuple((7, 10.0 + k / 100 + 0.005, 1) for k in range(10))))
    tail = stage_tail("s", [outer, inner], inputs(idx), threshold_ms=1.0)
    assert tail is not None and tail.slow_calls == 2 and tail.slow_samples == 10


def test_callers_that_only_lead_to_the_slow_function_are_left_out() -> None:
    """An ASGI app's slow requests: their samples run through the middleware chain into
    ``slow_lookup``; the typical ones' mostly wait in the loop's select. Every frame of the
    chain has the same excess as slow_lookup: only slow_lookup, where it goes, is listed."""
    mw = [Frame(f"Middleware{i}.__call__", "/srv/mw.py", 10 * i) for i in range(4)]
    lookup, select = Frame("slow_lookup", "/srv/app.py", 36), Frame("select", "/usr/lib/selectors.py", 468)
    stacks = {0: [MAIN, *mw, lookup], 1: [MAIN, select], 2: [MAIN, *mw, ENCODE]}
    spans = [StageSpan(7, "request", 10.0 + i, 10.0 + i + (0.05 if i < 2 else 0.005)) for i in range(100)]
    rows = []
    for sp in spans:
        slow = sp.t_end - sp.t_start > 0.01
        n = 5 if slow else 1
        rows += [(7, sp.t_start + (k + 0.5) * (sp.t_end - sp.t_start) / n, 0 if slow else (2 if k % 2 else 1)) for k in range(n)]
    idx = CallSampleIndex()
    idx.add(CallSamples(100.0, tuple(sorted(rows, key=lambda r: r[1]))))
    inp = TailInputs(idx, stacks.__getitem__, lambda sid: "request", lambda tid: 0, {}, {}, True)
    tail = stage_tail("request", spans, inp)
    assert tail is not None and [f.function for f in tail.frames] == ["slow_lookup"]


def test_the_agent_s_own_wrapper_is_never_a_frame_the_slow_calls_have_more_of() -> None:
    """On Python 3.10/3.11 the agent's wrapper is on every timed call's stack, and a stage whose
    typical calls have no samples (a fast serializer) had it at the top of its slow calls'
    frames, 100 % against 0 %; the stage's own frames are what the view is for."""
    wrapper = Frame("_Wrappers._plain_wrapper.<locals>.infertop_timed", "<infertop-agent>", 3649)
    STACKS[3] = [MAIN, wrapper, ENCODE, RARE]
    try:
        spans, idx = workload(slow_stack=3)
        tail = stage_tail("preprocess", spans, inputs(idx))
    finally:
        del STACKS[3]
    assert tail is not None and [f.function for f in tail.frames] == ["rare_path"], tail.frames
