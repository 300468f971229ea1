"""The ``.infertop`` recording format, version 1.12 (documented in docs/recording-format.md).

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

from infertop.model.engine import EngineStats
from infertop.model.events import (
    AllocatorReading,
    CallSamples,
    CollectorStatus,
    CpuWait,
    Event,
    Frame,
    FrameDef,
    GcPause,
    GenerationCall,
    LoopLag,
    Marker,
    OpWindow,
    ProcessDef,
    SampleWindow,
    StackDef,
    StageRules,
    StageSpan,
    TargetExited,
    TargetInfo,
    ThreadDef,
)
from infertop.model.fields import as_str, decode_allocator
from infertop.model.gpu import GpuReading
from infertop.model.host_memory import HostMemoryReading, ObjectCensus
from infertop.model.numbers import real, whole
from infertop.record.engine_format import ENGINE_STATS, decode_engine_stats, encode_engine_stats
from infertop.record.generation_format import (
    GENERATION,
    SPAN_BATCH,
    decode_generation,
    decode_span_batch,
    encode_generation,
    encode_span_batch,
)
from infertop.record.gpu_format import GPU, decode_gpu_reading, encode_gpu_reading
from infertop.record.host_memory_format import (
    CENSUS,
    HOST_MEMORY,
    decode_census,
    decode_host_memory,
    encode_census,
    encode_host_memory,
)
from infertop.record.ops_format import OPS, OPS_BY_NAME, decode_ops, encode_ops
from infertop.record.pause_format import CALL_SAMPLES, GC, LOOP_LAG, decode_pause, encode_pause

MAGIC = b"INFERTOP"
MAJOR = 1
MINOR = 12
HEADER = struct.Struct(">8sHH")
RECORD = struct.Struct(">II")
MAX_RECORD = 256 * 1024 * 1024

TARGET, FRAME, STACK, THREAD, WINDOW, STATUS, SPAN, EXITED, MARKER, RULES = range(1, 11)
ALLOCATOR = 12  # added in 1.1, with code 11 (op windows): record/ops_format.py
# 13, NVML readings, added in 1.2: infertop/record/gpu_format.py
PROCESS = 14  # added in 1.3 (--children), with code 4's trailing pid
# 1.4: codes 11 and 12 gain a trailing pid (the process; written only when not the target)
# 1.5: code 5 gains a trailing 1 for a wall window (py-spy --idle: idle samples included)
# 1.6: codes 15-17, GC pauses, event-loop lag and call samples: infertop/record/pause_format.py;
#      code 7 gains a trailing request id (infertop.stage(..., request=ID))
# 1.7: code 18, one generation call, and code 19, a stage span with its batch size:
#      infertop/record/generation_format.py
# 1.8: code 20, a process's host memory (/proc and its cgroup): record/host_memory_format.py
# 1.9: code 21, an op window by field name, written instead of code 11: record/ops_format.py
CPU_WAIT = 22  # added in 1.10: a process's threads' time on a CPU and waiting for one
# 1.11: code 23, the agent's object census of a process's heap: record/host_memory_format.py
# 1.12: code 24, an LLM engine's scheduler state summed over a window: record/engine_format.py


def encode_event(ev: Event) -> list[Any]:
    match ev:
        case SampleWindow():
            flat = [x for row in ev.counts for x in row]
            out = [WINDOW, ev.t_start, ev.t_end, ev.rate_hz, ev.ticks, flat, ev.errors, ev.lag_s, ev.threads]
            return out + [1] if ev.idle else out
        case FrameDef():
            return [FRAME, ev.frame_id, ev.frame.function, ev.frame.file, ev.frame.line]
        case StackDef():
            return [STACK, ev.stack_id, list(ev.frames)]
        case ThreadDef():
            return [THREAD, ev.tid, ev.name] + ([ev.pid] if ev.pid else [])
        case ProcessDef():
            return [PROCESS, ev.pid, ev.ppid, ev.cmdline]
        case StageSpan() if ev.batch is not None:
            return encode_span_batch(ev)
        case StageSpan():
            return [SPAN, ev.tid, ev.stage, ev.t_start, ev.t_end] + ([ev.request] if ev.request is not None else [])
        case CollectorStatus():
            return [STATUS, ev.t, ev.collector, ev.state, ev.message]
        case TargetInfo():
            return [TARGET, ev.pid, ev.cmdline, ev.python, ev.torch, ev.started]
        case TargetExited():
            return [EXITED, ev.t, ev.reason]
        case Marker():
            return [MARKER, ev.t, ev.text, dict(ev.extra)]
        case StageRules():
            return [RULES, [[stage, pattern] for stage, pattern in ev.rules]]
        case OpWindow():
            return encode_ops(ev)
        case AllocatorReading():
            return [ALLOCATOR, ev.t, ev.device, ev.allocated, ev.reserved, ev.peak_allocated,
                    ev.alloc_retries, ev.ooms] + ([ev.pid] if ev.pid else [])  # fmt: skip
        case GpuReading():
            return encode_gpu_reading(ev)
        case GcPause() | LoopLag() | CallSamples():
            return encode_pause(ev)
        case GenerationCall():
            return encode_generation(ev)
        case HostMemoryReading():
            return encode_host_memory(ev)
        case ObjectCensus():
            return encode_census(ev)
        case CpuWait():
            return [CPU_WAIT, ev.t_start, ev.t_end, ev.pid, ev.run_ns, ev.wait_ns]
        case EngineStats():
            return encode_engine_stats(ev)
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
        return ProcessDef(whole(f[0]), whole(f[1]), as_str(f[2]))
    if code == SPAN:
        return StageSpan(whole(f[0]), str(f[1]), real(f[2]), real(f[3]), as_str(f[4]) if len(f) > 4 else None)
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
    if code in (OPS, OPS_BY_NAME):
        return decode_ops(code, f)
    if code == ALLOCATOR:
        return decode_allocator(f)
    if code == GPU:
        return decode_gpu_reading(f)
    if code in (GC, LOOP_LAG, CALL_SAMPLES):
        return decode_pause(code, f)
    if code == GENERATION:
        return decode_generation(f)
    if code == SPAN_BATCH:
        return decode_span_batch(f)
    if code == HOST_MEMORY:
        return decode_host_memory(f)
    if code == CENSUS:
        return decode_census(f)
    if code == CPU_WAIT:
        return CpuWait(real(f[0]), real(f[1]), whole(f[2]), whole(f[3]), whole(f[4]))
    if code == ENGINE_STATS:
        return decode_engine_stats(f)
    return None


