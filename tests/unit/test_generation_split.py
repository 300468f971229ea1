"""Prefill and decode split at the agent's first tokens (``analysis/generation_split.py``): a
thread's prefill and decode samples of a window move to the ratio of its generation calls'
prefill and decode seconds there, whichever arrives first, window or call; threads without
calls keep the stacks' split."""

from __future__ import annotations

import pytest

from infertop.analysis.session import Session
from infertop.collect.pyspy import RawSampleWindow
from infertop.model.events import Frame, GenerationCall, StageSpan
from infertop.record.reader import read_recording
from tests.support import data

UTILS = "/v/site-packages/transformers/generation/utils.py"
LOOP = Frame("serve", "/srv/app/server.py", 10)
PREFILL = (
    LOOP,
    Frame("GenerationMixin.generate", UTILS, 2300),
    Frame("GenerationMixin._prefill", UTILS, 2500),
)
DECODE = (
    LOOP,
    Frame("GenerationMixin.generate", UTILS, 2300),
    Frame("GenerationMixin._sample", UTILS, 2800),
)
T0 = 1.8e9
BATCHER, OTHER_GEN = 7, 8


def _window(
    session: Session, i: int, rows: list[tuple[int, tuple[Frame, ...], int]], idle: bool
) -> None:
    raw = RawSampleWindow(
        T0 + i,
        T0 + i + 1,
        100.0,
        100,
        tuple((tid, "t", stack, n) for tid, stack, n in rows),
        idle=idle,
    )
    for ev in session.intern(raw):
        session.apply(ev)


def _call(session: Session, tid: int, t_start: float, first: float | None, t_end: float) -> None:
    session.apply(GenerationCall(tid, t_start, first, t_end, batch=4, new_tokens=16))


def _split(session: Session, tid: int, view: str = "wall") -> tuple[int, int]:
    ws = session.windows[-1]
    per = (ws.wall_by_thread if view == "wall" else ws.by_thread)[tid]
    return per.get("prefill", 0), per.get("decode", 0)


@pytest.mark.parametrize("call_first", [False, True])
def test_a_window_s_generation_samples_follow_the_calls_time(call_first: bool) -> None:
    s = Session()
    # the stacks: 10 of the thread's 80 generation samples in _prefill; the agent's clock: a
    # call from 0.1 s to 0.9 s whose first token came at 0.5 s (half of it prefill)
    rows = [(BATCHER, PREFILL, 10), (BATCHER, DECODE, 70)]
    if call_first:
        _call(s, BATCHER, T0 + 0.1, T0 + 0.5, T0 + 0.9)
        _window(s, 0, rows, idle=True)
    else:
        _window(s, 0, rows, idle=True)
        _call(s, BATCHER, T0 + 0.1, T0 + 0.5, T0 + 0.9)
    assert _split(s, BATCHER) == (40, 40)
    ws = s.windows[-1]
    assert ws.stage_counts["prefill"] == 40 and ws.stage_counts["decode"] == 40  # the totals too
    assert ws.active == 80


def test_a_call_across_windows_splits_each_by_its_own_part() -> None:
    s = Session()
    _window(s, 0, [(BATCHER, PREFILL, 20), (BATCHER, DECODE, 80)], idle=True)
    _window(s, 1, [(BATCHER, DECODE, 100)], idle=True)
    # prefill 0.5-1.2 s, decode 1.2-2.0 s: the first window's part of the call is all prefill,
    # the second's 20 %
    _call(s, BATCHER, T0 + 0.5, T0 + 1.2, T0 + 2.0)
    first, second = s.windows
    assert (first.wall_by_thread[BATCHER]["prefill"], first.wall_by_thread[BATCHER]["decode"]) == (
        100,
        0,
    )
    assert (
        second.wall_by_thread[BATCHER]["prefill"],
        second.wall_by_thread[BATCHER]["decode"],
    ) == (20, 80)


def test_cpu_windows_split_their_active_samples_and_threads_without_calls_keep_the_stacks() -> None:
    s = Session()
    _window(
        s, 0, [(BATCHER, DECODE, 60), (OTHER_GEN, PREFILL, 30), (OTHER_GEN, DECODE, 30)], idle=False
    )
    _call(s, BATCHER, T0, T0 + 0.25, T0 + 1.0)
    assert _split(s, BATCHER, "cpu") == (15, 45)
    assert _split(s, OTHER_GEN, "cpu") == (30, 30)  # no call: the stack rules stand
    assert s.windows[-1].stage_counts["prefill"] == 45


def test_a_call_without_a_first_token_and_other_stages_spans_move_nothing() -> None:
    s = Session()
    _window(s, 0, [(BATCHER, DECODE, 50), (BATCHER, (LOOP,), 50)], idle=True)
    s.apply(StageSpan(BATCHER, "prefill", T0, T0 + 1.0))  # a span is no generation call
    _call(s, BATCHER, T0, None, T0 + 1.0)  # a call that chose no token: where it split is unknown
    assert _split(s, BATCHER) == (0, 50)
    assert s.windows[-1].wall_by_thread[BATCHER]["other"] == 50


def test_a_real_recording_s_windows_follow_the_agent_s_first_tokens() -> None:
    """29 real ``generate`` calls on Python 3.12: in every window the agent timed, the batcher's
    prefill share of its generation samples is the calls' prefill share of their time there."""
    rec = read_recording(str(data.DATA / "recordings" / "textgen_hf.infertop"))
    s = Session()
    for ev in rec.events:
        s.apply(ev)
    calls = [e for e in rec.events if isinstance(e, GenerationCall)]
    tid = calls[0].tid
    checked = 0
    for ws in s.windows:
        t0, t1 = ws.window.t_start, ws.window.t_end
        pre = sum(max(0.0, min(c.t_first, t1) - max(c.t_start, t0)) for c in calls)
        dec = sum(max(0.0, min(c.t_end, t1) - max(c.t_first, t0)) for c in calls)
        per = ws.wall_by_thread.get(tid) or {}
        n = per.get("prefill", 0) + per.get("decode", 0)
        if not pre + dec or not n:
            continue
        assert per.get("prefill", 0) == pytest.approx(n * pre / (pre + dec), abs=0.5), (t0, per)
        checked += 1
    assert checked >= 5
