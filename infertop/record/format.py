"""The ``.infertop`` recording format, version 1.5 (documented in docs/recording-format.md).

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
    AllocatorReading,
    Annotation,
    CollectorStatus,
    Event,
    Frame,
    FrameDef,
    GpuActivity,
    KernelStat,
    Marker,
    MemcpyStat,
    OpPath,
    OpTime,
    OpWindow,
    ProcessDef,
    SampleWindow,
    StackDef,
    StageRules,
    StageSpan,
    SyncStat,
    TargetExited,
    TargetInfo,
    ThreadDef,
)
from infertop.model.gpu import GpuReading
from infertop.record.gpu_format import GPU, decode_gpu_reading, encode_gpu_reading
from infertop.record.numbers import bounded_float, bounded_int, real, whole

MAGIC = b"INFERTOP"
MAJOR = 1
MINOR = 5
HEADER = struct.Struct(">8sHH")
RECORD = struct.Struct(">II")
MAX_RECORD = 256 * 1024 * 1024

TARGET, FRAME, STACK, THREAD, WINDOW, STATUS, SPAN, EXITED, MARKER, RULES = range(1, 11)
OPS, ALLOCATOR = 11, 12  # added in 1.1
# 13, NVML readings, added in 1.2: infertop/record/gpu_format.py
PROCESS = 14  # added in 1.3 (--children), with code 4's trailing pid
# 1.4: codes 11 and 12 gain a trailing pid (the process; written only when not the target)
# 1.5: code 5 gains a trailing 1 for a wall window (py-spy --idle: idle samples included)


def encode_event(ev: Event) -> list[Any]:
    if isinstance(ev, SampleWindow):
        flat = [x for row in ev.counts for x in row]
        out = [WINDOW, ev.t_start, ev.t_end, ev.rate_hz, ev.ticks, flat, ev.errors, ev.lag_s, ev.threads]
        return out + [1] if ev.idle else out
    if isinstance(ev, FrameDef):
        return [FRAME, ev.frame_id, ev.frame.function, ev.frame.file, ev.frame.line]
    if isinstance(ev, StackDef):
        return [STACK, ev.stack_id, list(ev.frames)]
    if isinstance(ev, ThreadDef):
        return [THREAD, ev.tid, ev.name] + ([ev.pid] if ev.pid else [])
    if isinstance(ev, ProcessDef):
        return [PROCESS, ev.pid, ev.ppid, ev.cmdline]
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
    if isinstance(ev, OpWindow):
        return encode_op_window(ev)
    if isinstance(ev, AllocatorReading):
        return [ALLOCATOR, ev.t, ev.device, ev.allocated, ev.reserved, ev.peak_allocated,
                ev.alloc_retries, ev.ooms] + ([ev.pid] if ev.pid else [])  # fmt: skip
    if isinstance(ev, GpuReading):
        return encode_gpu_reading(ev)
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
            (whole(flat[i]), whole(flat[i + 1]), whole(flat[i + 2])) for i in range(0, len(flat), 3)
        )
        return SampleWindow(
            real(f[0]), real(f[1]), real(f[2]), whole(f[3]), counts, whole(f[5]), real(f[6]),
            whole(f[7]) if len(f) > 7 else 0,
            bool(whole(f[8])) if len(f) > 8 else False,
        )  # fmt: skip
    if code == FRAME:
        return FrameDef(whole(f[0]), Frame(str(f[1]), str(f[2]), whole(f[3])))
    if code == STACK:
        return StackDef(whole(f[0]), tuple(whole(x) for x in f[1]))
    if code == THREAD:
        return ThreadDef(whole(f[0]), str(f[1]), whole(f[2]) if len(f) > 2 else 0)
    if code == PROCESS:
        return ProcessDef(whole(f[0]), whole(f[1]), _str(f[2]))
    if code == SPAN:
        return StageSpan(whole(f[0]), str(f[1]), real(f[2]), real(f[3]))
    if code == STATUS:
        return CollectorStatus(real(f[0]), str(f[1]), str(f[2]), str(f[3]))
    if code == TARGET:
        return TargetInfo(
            None if f[0] is None else whole(f[0]),
            None if f[1] is None else str(f[1]),
            None if f[2] is None else str(f[2]),
            None if f[3] is None else str(f[3]),
            real(f[4]),
        )
    if code == EXITED:
        return TargetExited(real(f[0]), str(f[1]))
    if code == MARKER:
        extra = f[2] if isinstance(f[2], dict) else {}
        return Marker(real(f[0]), str(f[1]), {str(k): str(v) for k, v in extra.items()})
    if code == RULES:
        return StageRules(tuple((str(r[0]), str(r[1])) for r in f[0]))
    if code == OPS:
        return decode_op_window(f)
    if code == ALLOCATOR:
        return decode_allocator(f)
    if code == GPU:
        return decode_gpu_reading(f)
    return None


# -- 1.1: torch-profiler windows and allocator readings ---------------------------------------
def encode_op_window(w: OpWindow) -> list[Any]:
    return [
        OPS, w.t_start, w.t_end, w.source, w.events, w.truncated,
        [[list(p.names), p.stage, p.device, p.count, p.total_us, p.self_us, p.shapes]
         for p in w.paths],
        [[k.name, k.kind, k.count, k.total_us, k.min_us, k.max_us] for k in w.kernels],
        [[m.kind, m.host_memory, m.count, m.bytes, m.total_us] for m in w.memcpy],
        [[y.name, y.count, y.total_us] for y in w.syncs],
        [[a.name, a.tid, a.t_start, a.t_end] for a in w.annotations],
        None if w.gpu is None else [w.gpu.busy_us, w.gpu.span_us, w.gpu.max_gap_us],
        None if w.op_time is None else [w.op_time.ops, w.op_time.in_ops_us, w.op_time.wall_us],
    ] + ([w.pid] if w.pid else [])  # fmt: skip


def _str(x: Any) -> str:
    if not isinstance(x, str):
        raise ValueError(f"expected a string, got {type(x).__name__}")
    return x


def _opt_str(x: Any) -> str | None:
    return None if x is None else _str(x)


def _int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(f"expected an integer, got {type(x).__name__}")
    return bounded_int(x)


def _num(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"expected a number, got {type(x).__name__}")
    return bounded_float(float(x))


def _names(x: Any) -> tuple[str, ...]:
    if not isinstance(x, list) or not x:
        raise ValueError("an op path needs a non-empty list of names")
    return tuple(_str(n) for n in x)


def _rows(x: Any, width: int) -> list[list[Any]]:
    if not isinstance(x, list) or any(not isinstance(r, list) or len(r) < width for r in x):
        raise ValueError(f"expected a list of rows of {width} fields")
    return x


def _checked(fn: Any, f: list[Any]) -> Any:
    """Run a decoder; any malformation becomes ValueError (the reader's damaged-record path)."""
    try:
        return fn(f)
    except (TypeError, IndexError, KeyError, AttributeError) as exc:
        raise ValueError(f"malformed event: {exc}") from None


def _decode_allocator(f: list[Any]) -> AllocatorReading:
    return AllocatorReading(
        _num(f[0]), _int(f[1]), _int(f[2]), _int(f[3]), _int(f[4]), _int(f[5]), _int(f[6]),
        _int(f[7]) if len(f) > 7 else 0,
    )


def _decode_op_window(f: list[Any]) -> OpWindow:
    if not isinstance(f[4], bool):
        raise ValueError("truncated is not a bool")
    paths = tuple(
        OpPath(_names(r[0]), _str(r[1]), _str(r[2]), _int(r[3]), _num(r[4]), _num(r[5]),
               _opt_str(r[6]))
        for r in _rows(f[5], 7)
    )  # fmt: skip
    kernels = tuple(
        KernelStat(_str(r[0]), _str(r[1]), _int(r[2]), _num(r[3]), _num(r[4]), _num(r[5]))
        for r in _rows(f[6], 6)
    )
    memcpy = tuple(
        MemcpyStat(_str(r[0]), _str(r[1]), _int(r[2]), _int(r[3]), _num(r[4]))
        for r in _rows(f[7], 5)
    )
    syncs = tuple(SyncStat(_str(r[0]), _int(r[1]), _num(r[2])) for r in _rows(f[8], 3))
    annotations = tuple(
        Annotation(_str(r[0]), _int(r[1]), _num(r[2]), _num(r[3])) for r in _rows(f[9], 4)
    )
    g = f[10]
    if g is not None and (not isinstance(g, list) or len(g) < 3):
        raise ValueError("bad gpu activity")
    gpu = None if g is None else GpuActivity(_num(g[0]), _num(g[1]), _num(g[2]))
    o = f[11] if len(f) > 11 else None  # a trailing field: absent in older windows
    if o is not None and (not isinstance(o, list) or len(o) < 3):
        raise ValueError("bad op time")
    op_time = None if o is None else OpTime(_int(o[0]), _num(o[1]), _num(o[2]))
    return OpWindow(
        _num(f[0]), _num(f[1]), _str(f[2]), _int(f[3]), f[4],
        paths, kernels, memcpy, syncs, annotations, gpu, op_time,
        _int(f[12]) if len(f) > 12 else 0,
    )  # fmt: skip


def decode_op_window(f: list[Any]) -> OpWindow:
    """An op window from its fields (after the code). The rows are laid out exactly as the
    agent protocol sends them, so the agent client validates its messages with this too."""
    return _checked(_decode_op_window, f)  # type: ignore[no-any-return]


def decode_allocator(f: list[Any]) -> AllocatorReading:
    return _checked(_decode_allocator, f)  # type: ignore[no-any-return]
