"""Recording events 15-17 (format 1.6): the agent's evidence for slow calls
(docs/recording-format.md).

    [15, t_start, t_end, generation, collected, tid, pid?]       one garbage collection
    [16, t, lag_s, tid, pid?]                                    one event-loop heartbeat
    [17, rate_hz, [tid, t, stack id, ...] flat, [t0, t1, ...] flat, pid?]
                                                                 call samples, GIL waits

``pid`` is written only for a process other than the target (as in codes 11 and 12).
"""

from __future__ import annotations

from typing import Any

from infertop.model.events import CallSamples, GcPause, LoopLag
from infertop.model.numbers import real, whole

GC, LOOP_LAG, CALL_SAMPLES = 15, 16, 17


def _pid(pid: int) -> list[int]:
    return [pid] if pid else []


def encode_pause(ev: GcPause | LoopLag | CallSamples) -> list[Any]:
    if isinstance(ev, GcPause):
        return [GC, ev.t_start, ev.t_end, ev.generation, ev.collected, ev.tid] + _pid(ev.pid)
    if isinstance(ev, LoopLag):
        return [LOOP_LAG, ev.t, ev.lag_s, ev.tid] + _pid(ev.pid)
    flat = [x for row in ev.samples for x in row]
    waits = [x for w in ev.gil_waits for x in w]
    return [CALL_SAMPLES, ev.rate_hz, flat, waits] + _pid(ev.pid)


def decode_pause(code: int, f: list[Any]) -> GcPause | LoopLag | CallSamples:
    if code == GC:
        gen = int(f[2])
        if not -1 <= gen <= 2:
            raise ValueError(f"GC generation {gen}")
        return GcPause(real(f[0]), real(f[1]), gen, whole(f[3]), whole(f[4]), whole(f[5]) if len(f) > 5 else 0)
    if code == LOOP_LAG:
        return LoopLag(real(f[0]), real(f[1]), whole(f[2]), whole(f[3]) if len(f) > 3 else 0)
    flat, waits = f[1], f[2]
    if not isinstance(flat, list) or len(flat) % 3 or not isinstance(waits, list) or len(waits) % 2:
        raise ValueError("bad call samples")
    rows = tuple((whole(flat[i]), real(flat[i + 1]), whole(flat[i + 2])) for i in range(0, len(flat), 3))
    pairs = tuple((real(waits[i]), real(waits[i + 1])) for i in range(0, len(waits), 2))
    return CallSamples(real(f[0]), rows, pairs, whole(f[3]) if len(f) > 3 else 0)
