"""The ``.infertop`` recording format, version 1.0 (documented in docs/recording-format.md).

    file    = header record*
    header  = b"INFERTOP" u16 major u16 minor          (big-endian)
    record  = u32 length u32 crc32(payload) payload    (big-endian; length = len(payload))
    payload = msgpack array of events; event = [code, field...]

A reader stops at the first record whose length runs past the end or whose CRC fails, so a
writer killed mid-write loses only its last unflushed batch. Event codes unknown to a reader of
the same major version are skipped (new minor versions only add codes).
"""

from __future__ import annotations

import struct
from typing import Any

from infertop.model.events import (
    CollectorStatus,
    Event,
    Frame,
    FrameDef,
    Marker,
    SampleWindow,
    StackDef,
    StageRules,
    StageSpan,
    TargetExited,
    TargetInfo,
    ThreadDef,
)

MAGIC = b"INFERTOP"
MAJOR = 1
MINOR = 0
HEADER = struct.Struct(">8sHH")
RECORD = struct.Struct(">II")
MAX_RECORD = 256 * 1024 * 1024

TARGET, FRAME, STACK, THREAD, WINDOW, STATUS, SPAN, EXITED, MARKER, RULES = range(1, 11)


def encode_event(ev: Event) -> list[Any]:
    if isinstance(ev, SampleWindow):
        flat = [x for row in ev.counts for x in row]
        return [WINDOW, ev.t_start, ev.t_end, ev.rate_hz, ev.ticks, flat, ev.errors, ev.lag_s, ev.threads]
    if isinstance(ev, FrameDef):
        return [FRAME, ev.frame_id, ev.frame.function, ev.frame.file, ev.frame.line]
    if isinstance(ev, StackDef):
        return [STACK, ev.stack_id, list(ev.frames)]
    if isinstance(ev, ThreadDef):
        return [THREAD, ev.tid, ev.name]
    if isinstance(ev, StageSpan):
        return [SPAN, ev.tid, ev.stage, ev.t_start, ev.t_end]
    if isinstance(ev, CollectorStatus):
        return [STATUS, ev.t, ev.collector, ev.state, ev.message]
    if isinstance(ev, TargetInfo):
        return [TARGET, ev.pid, ev.cmdline, ev.python, ev.torch, ev.started]
    if isinstance(ev, TargetExited):
        return [EXITED, ev.t, ev.reason]
    if isinstance(ev, Marker):
        return [MARKER, ev.t, ev.text, dict(ev.extra)]
    if isinstance(ev, StageRules):
        return [RULES, [[stage, pattern] for stage, pattern in ev.rules]]
    raise TypeError(f"cannot encode {type(ev).__name__}")


def decode_event(raw: Any) -> Event | None:
    """Decode one event; None for codes this version does not know. Raises on malformed data."""
    if not isinstance(raw, list) or not raw or not isinstance(raw[0], int):
        raise ValueError("event is not [code, ...]")
    code, f = raw[0], raw[1:]
    if code == WINDOW:
        flat = f[4]
        if not isinstance(flat, list) or len(flat) % 3:
            raise ValueError("bad sample counts")
        counts = tuple(
            (int(flat[i]), int(flat[i + 1]), int(flat[i + 2])) for i in range(0, len(flat), 3)
        )
        return SampleWindow(
            float(f[0]), float(f[1]), float(f[2]), int(f[3]), counts, int(f[5]), float(f[6]),
            int(f[7]) if len(f) > 7 else 0,
        )  # fmt: skip
    if code == FRAME:
        return FrameDef(int(f[0]), Frame(str(f[1]), str(f[2]), int(f[3])))
    if code == STACK:
        return StackDef(int(f[0]), tuple(int(x) for x in f[1]))
    if code == THREAD:
        return ThreadDef(int(f[0]), str(f[1]))
    if code == SPAN:
        return StageSpan(int(f[0]), str(f[1]), float(f[2]), float(f[3]))
    if code == STATUS:
        return CollectorStatus(float(f[0]), str(f[1]), str(f[2]), str(f[3]))
    if code == TARGET:
        return TargetInfo(
            None if f[0] is None else int(f[0]),
            None if f[1] is None else str(f[1]),
            None if f[2] is None else str(f[2]),
            None if f[3] is None else str(f[3]),
            float(f[4]),
        )
    if code == EXITED:
        return TargetExited(float(f[0]), str(f[1]))
    if code == MARKER:
        extra = f[2] if isinstance(f[2], dict) else {}
        return Marker(float(f[0]), str(f[1]), {str(k): str(v) for k, v in extra.items()})
    if code == RULES:
        return StageRules(tuple((str(r[0]), str(r[1])) for r in f[0]))
    return None
