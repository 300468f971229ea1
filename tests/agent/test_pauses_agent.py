"""The agent's pause and call-sample parts, run in this process as modules: the GC callback,
the event-loop heartbeat on a real running loop, the call sampler's stacks and messages, and
that stopping leaves nothing installed (agent/payload/pauses.py, callsamples.py)."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time

from infertop.agent.payload.callsamples import _CallSamplerMixin, sample_message, stack_of
from infertop.agent.payload.constants import DEFAULT_CONFIG
from infertop.agent.payload.pauses import _PausesMixin, running_loops
from infertop.collect.agent.client import convert
from infertop.model.events import GcPause, LoopLag


class Agent(_PausesMixin, _CallSamplerMixin):
    """The two mixins with what they use of the agent: its config, thread, monitor and _send."""

    def __init__(self) -> None:
        self.config = dict(DEFAULT_CONFIG)
        self.thread = None
        self.monitor = None
        self.sent: list[dict] = []
        self._init_pauses()
        self._init_call_samples()

    def _send(self, msg: dict) -> None:
        self.sent.append(msg)


def run_loop_in_thread(block_s: float):
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.call_later(0.3, time.sleep, block_s)  # a callback that blocks the loop
        loop.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(10)
    return loop, t


def test_gc_pauses_are_timed_and_the_callback_goes_at_stop() -> None:
    a = Agent()
    before = list(gc.callbacks)
    a._start_pauses()
    assert len(gc.callbacks) == len(before) + 1
    junk = [[] for _ in range(50000)]
    for _ in range(3):
        gc.collect()
    del junk
    a._flush_pauses(time.time_ns() - time.perf_counter_ns())
    (msg,) = a.sent
    events = convert(msg)
    full = [e for e in events if isinstance(e, GcPause) and e.generation == 2]
    assert len(full) >= 3
    assert all(0 < e.t_end - e.t_start < 5 and abs(e.t_end - time.time()) < 60 for e in full)
    assert all(e.tid == threading.get_native_id() for e in full)
    a._stop_pauses()
    assert gc.callbacks == before


def test_a_running_loop_is_found_and_its_lag_measured() -> None:
    loop, thread = run_loop_in_thread(block_s=0.25)
    try:
        found = running_loops()
        assert [entry[0] for entry in found.values()] == [loop]
        assert list(found.values())[0][1] == thread.native_id
        a = Agent()
        a._start_pauses()
        deadline = time.monotonic() + 10
        lags: list[LoopLag] = []
        while time.monotonic() < deadline and not any(x.lag_s > 0.1 for x in lags):
            a._tick_pauses(time.monotonic())
            time.sleep(0.02)
            a._flush_pauses(time.time_ns() - time.perf_counter_ns())
            lags = [e for m in a.sent for e in convert(m) if isinstance(e, LoopLag)]
        # the blocked callback made one heartbeat late by most of its 0.25 s
        assert max(x.lag_s for x in lags) > 0.1, lags
        assert all(x.tid == thread.native_id for x in lags)
        a._stop_pauses()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    assert running_loops() == {}


def test_call_samples_take_the_stacks_of_threads_inside_calls() -> None:
    stop = threading.Event()
    inside = threading.Event()

    def rare_slow_path() -> None:
        inside.set()
        stop.wait(10)

    worker = threading.Thread(target=rare_slow_path, daemon=True)
    worker.start()
    assert inside.wait(10)
    a = Agent()
    a._start_call_samples()
    a._note_span_thread(worker.ident, worker.native_id)  # as an infertop.stage span's end does
    for _ in range(5):
        a.next_call_sample = 0.0
        a._tick_call_samples(time.monotonic())
    stop.set()
    worker.join(10)
    a._flush_call_samples(time.time_ns() - time.perf_counter_ns())
    (msg,) = a.sent
    (raw,) = convert(msg)
    assert raw.rate_hz == DEFAULT_CONFIG["call_sample_hz"] and len(raw.samples) == 5
    tid, t, frames = raw.samples[0]
    assert tid == worker.native_id and abs(t - time.time()) < 60
    mine = [f for f in frames if f.function.endswith("rare_slow_path")]
    assert mine and mine[0].file == __file__
    assert frames[-1].function == "Condition.wait"  # the innermost: it waits in stop.wait
    assert len(msg["stacks"]) == 1  # five samples of one stack: one table entry
    a._stop_call_samples()
    assert not a.span_threads and not a.call_samples


def test_sample_messages_stand_alone() -> None:
    here = stack_of(sys._getframe())
    assert here[-1][0] is sys._getframe().f_code and here[0][0].co_name != "stack_of"
    msg = sample_message([(1, 10, here), (2, 20, here[:-1]), (1, 30, here)], 0, 50.0, [(5, 15)])
    assert len(msg["stacks"]) == 2 and len(msg["frames"]) == len({code for code, _ in here})
    assert [r[2] for r in msg["samples"]] == [0, 1, 0]
    (raw,) = convert(msg)
    assert raw.gil_waits == ((5e-9, 1.5e-8),)
    assert raw.samples[0][2][-1].line == here[-1][1]
