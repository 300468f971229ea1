"""A session's tails and pauses at a moment: the inputs of ``tail.stage_tail`` and
``pauses.summarize_pauses`` read off a ``Session`` (a snapshot's ``tails`` and ``pauses``)."""

from __future__ import annotations

from collections.abc import Mapping

from infertop.analysis.pauses import PauseSummary, summarize_pauses
from infertop.analysis.session import Session
from infertop.analysis.tail import (
    IntervalSet,
    StageTail,
    TailInputs,
    memory_pressure,
    stage_tail,
)


def session_pauses(
    session: Session, t: float | None, duration_s: float, process: int | None = None
) -> PauseSummary:
    """The pauses up to ``t``; ``process``: one process's only (its agent's GC pauses, loop
    lags and GIL waits), as the view of that process and its own findings use them."""
    target = session.target.pid or 0

    def mine(pid: int) -> bool:  # an agent's pid 0 is the target's
        return process is None or pid == process or (pid == 0 and process == target)

    gc = [p for p in session.gc_pauses if (t is None or p.t_end <= t) and mine(p.pid)]
    lags = [x for x in session.loop_lags if (t is None or x.t <= t) and mine(x.pid)]
    samples = session.call_samples
    gil = None
    if samples.n or samples.gil_waits:
        gil = [
            IntervalSet(w for w in waits if t is None or w[1] <= t).total
            for pid, waits in samples.gil_waits.items()
            if mine(pid)
        ]
    return summarize_pauses(
        gc, lags, session.pause_fold, duration_s, session.spans_between(None, t), gil
    )


def session_tails(
    session: Session, t: float | None, slow: Mapping[str, float] | None = None
) -> tuple[StageTail, ...]:
    """The tail of every stage with calls up to ``t``; ``slow``: thresholds (ms) by stage that
    replace the p99 (``--slow STAGE=MS``)."""
    spans = session.spans_between(None, t)
    if not spans:
        return ()
    slow = slow or {}
    gc: dict[int, list[tuple[float, float]]] = {}
    for p in session.gc_pauses:
        if t is None or p.t_end <= t:
            gc.setdefault(p.pid, []).append((p.t_start, p.t_end))
    prof: dict[int, list[tuple[float, float]]] = {}
    for w in session.op_windows_between(None, t):
        if w.source == "agent":
            prof.setdefault(w.pid, []).append((w.t_start, w.t_end))
    target = session.target.pid or 0

    def pid_of(tid: int) -> int:
        pid = session.thread_pid.get(tid, 0)
        return 0 if pid == target else pid

    readings = session.host_memory_upto(t)
    inputs = TailInputs(
        samples=session.call_samples,
        frames_of=session.symbols.stack_frames,
        stage_of=session.stage_of,
        pid_of=pid_of,
        gc={pid: IntervalSet(iv) for pid, iv in gc.items()},
        profiler={pid: IntervalSet(iv) for pid, iv in prof.items()},
        sampled=session.call_samples.n > 0,
        # the target's readings carry its pid; its threads' spans, 0
        memory=memory_pressure(readings, lambda pid: 0 if pid == target else pid)
        if readings
        else None,
    )
    names = sorted({sp.stage for sp in spans})
    out = []
    for name in names:
        tail = stage_tail(name, spans, inputs, slow.get(name))
        if tail is not None:
            out.append(tail)
    return tuple(out)
