"""The field forms of op windows and allocator readings, decoded and checked.

An op window is a mapping by field name (``OP_WINDOW_FIELDS``): the agent's ``window`` message
is one (with ``source`` added), and a recording's op window (code 21) holds one; rows inside it
(paths, kernels, ...) are the protocol's fixed-width rows. Allocator readings are the field list
both the wire and the recording's code 12 lay out alike. Any malformation is ``ValueError``,
the reader's damaged-record path and the agent client's bad-message path."""

from __future__ import annotations

from typing import Any

from infertop.model.events import (
    AllocatorReading,
    Annotation,
    GpuActivity,
    KernelStat,
    MemcpyStat,
    OpPath,
    OpTime,
    OpWindow,
    SyncStat,
)
from infertop.model.numbers import bounded_float, bounded_int
from infertop.model.torch_memory import MemoryOp, MemoryStage, OpMemory


def as_str(x: Any) -> str:
    if not isinstance(x, str):
        raise ValueError(f"expected a string, got {type(x).__name__}")
    return x


def as_opt_str(x: Any) -> str | None:
    return None if x is None else as_str(x)


def as_int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(f"expected an integer, got {type(x).__name__}")
    return bounded_int(x)


def as_num(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"expected a number, got {type(x).__name__}")
    return bounded_float(float(x))


def as_names(x: Any) -> tuple[str, ...]:
    if not isinstance(x, list) or not x:
        raise ValueError("an op path needs a non-empty list of names")
    return tuple(as_str(n) for n in x)


def as_rows(x: Any, width: int) -> list[list[Any]]:
    if not isinstance(x, list) or any(not isinstance(r, list) or len(r) < width for r in x):
        raise ValueError(f"expected a list of rows of {width} fields")
    return x


def _checked(fn: Any, f: Any) -> Any:
    """Run a decoder; any malformation becomes ValueError (the reader's damaged-record path)."""
    try:
        return fn(f)
    except (TypeError, IndexError, KeyError, AttributeError) as exc:
        raise ValueError(f"malformed event: {exc}") from None


def _decode_allocator(f: list[Any]) -> AllocatorReading:
    return AllocatorReading(
        as_num(f[0]), as_int(f[1]), as_int(f[2]), as_int(f[3]), as_int(f[4]), as_int(f[5]), as_int(f[6]),
        as_int(f[7]) if len(f) > 7 else 0,
    )


#: an op window's fields: gpu and op_time may be None, op_time (agents before it), pid (0:
#: the target) and memory (not profiled with profile_memory) absent; a receiver ignores names
#: it does not know
OP_WINDOW_FIELDS = ("t_start", "t_end", "source", "events", "truncated", "paths", "kernels",
                    "memcpy", "syncs", "annotations", "gpu", "op_time", "pid", "memory")  # fmt: skip
GPU_FIELDS = ("busy_us", "span_us", "max_gap_us")
#: run_us and wait_us: absent where not measured (agents before them, traces)
OP_TIME_FIELDS = ("ops", "in_ops_us", "wall_us", "run_us", "wait_us")


def _mapping(x: Any, what: str) -> dict[str, Any]:
    if not isinstance(x, dict):
        raise ValueError(f"{what} is not a mapping of fields")
    return x


def _op_time(o: dict[str, Any]) -> OpTime:
    cpu = (as_num(o["run_us"]), as_num(o["wait_us"])) if "run_us" in o and "wait_us" in o else (None, None)
    return OpTime(as_int(o["ops"]), as_num(o["in_ops_us"]), as_num(o["wall_us"]), *cpu)


def _op_memory(m: dict[str, Any]) -> OpMemory:
    stages = tuple(
        MemoryStage(as_str(r[0]), as_str(r[1]), *(as_int(x) for x in r[2:8]))
        for r in as_rows(m["stages"], 8)
    )
    ops = tuple(
        MemoryOp(as_names(r[0]), as_str(r[1]), as_str(r[2]), as_int(r[3]), as_int(r[4]))
        for r in as_rows(m["ops"], 5)
    )
    rows = m.get("rows")
    return OpMemory(stages, ops, None if rows is None else as_int(rows))


def _op_memory_fields(m: OpMemory) -> dict[str, Any]:
    return {
        "stages": [[s.stage, s.device, s.calls, s.allocs, s.alloc_bytes, s.freed_bytes, s.peak_max,
                    s.peak_sum] for s in m.stages],
        "ops": [[list(o.names), o.stage, o.device, o.allocs, o.alloc_bytes] for o in m.ops],
        "rows": m.rows,
    }  # fmt: skip


def _decode_op_window(d: dict[str, Any]) -> OpWindow:
    d = _mapping(d, "an op window")
    if not isinstance(d["truncated"], bool):
        raise ValueError("truncated is not a bool")
    paths = tuple(
        OpPath(as_names(r[0]), as_str(r[1]), as_str(r[2]), as_int(r[3]), as_num(r[4]), as_num(r[5]),
               as_opt_str(r[6]))
        for r in as_rows(d["paths"], 7)
    )  # fmt: skip
    kernels = tuple(
        KernelStat(as_str(r[0]), as_str(r[1]), as_int(r[2]), as_num(r[3]), as_num(r[4]), as_num(r[5]))
        for r in as_rows(d["kernels"], 6)
    )
    memcpy = tuple(
        MemcpyStat(as_str(r[0]), as_str(r[1]), as_int(r[2]), as_int(r[3]), as_num(r[4]))
        for r in as_rows(d["memcpy"], 5)
    )
    syncs = tuple(SyncStat(as_str(r[0]), as_int(r[1]), as_num(r[2])) for r in as_rows(d["syncs"], 3))
    annotations = tuple(
        Annotation(as_str(r[0]), as_int(r[1]), as_num(r[2]), as_num(r[3])) for r in as_rows(d["annotations"], 4)
    )
    g, o, m = d["gpu"], d.get("op_time"), d.get("memory")
    gpu = None if g is None else GpuActivity(*(as_num(_mapping(g, "gpu")[k]) for k in GPU_FIELDS))
    return OpWindow(
        as_num(d["t_start"]), as_num(d["t_end"]), as_str(d["source"]), as_int(d["events"]), d["truncated"],
        paths, kernels, memcpy, syncs, annotations, gpu,
        None if o is None else _op_time(_mapping(o, "op_time")), as_int(d.get("pid", 0)),
        None if m is None else _op_memory(_mapping(m, "memory")),
    )  # fmt: skip


def decode_op_window(fields: dict[str, Any]) -> OpWindow:
    """An op window from its fields by name (``OP_WINDOW_FIELDS``): the agent's ``window``
    message with ``source`` added, or a recording's."""
    return _checked(_decode_op_window, fields)


def op_window_fields(w: OpWindow) -> dict[str, Any]:
    """The fields of ``w`` by name, as ``decode_op_window`` reads them."""
    op_time: dict[str, Any] | None = None
    if w.op_time is not None:
        t = w.op_time
        op_time = {"ops": t.ops, "in_ops_us": t.in_ops_us, "wall_us": t.wall_us}
        if t.run_us is not None and t.wait_us is not None:
            op_time.update(run_us=t.run_us, wait_us=t.wait_us)
    gpu = None if w.gpu is None else dict(zip(GPU_FIELDS, (w.gpu.busy_us, w.gpu.span_us, w.gpu.max_gap_us)))
    out = {
        "t_start": w.t_start, "t_end": w.t_end, "source": w.source, "events": w.events,
        "truncated": w.truncated,
        "paths": [[list(p.names), p.stage, p.device, p.count, p.total_us, p.self_us, p.shapes]
                  for p in w.paths],
        "kernels": [[k.name, k.kind, k.count, k.total_us, k.min_us, k.max_us] for k in w.kernels],
        "memcpy": [[m.kind, m.host_memory, m.count, m.bytes, m.total_us] for m in w.memcpy],
        "syncs": [[y.name, y.count, y.total_us] for y in w.syncs],
        "annotations": [[a.name, a.tid, a.t_start, a.t_end] for a in w.annotations],
        "gpu": gpu, "op_time": op_time,
    }  # fmt: skip
    if w.pid:
        out["pid"] = w.pid
    if w.memory is not None:
        out["memory"] = _op_memory_fields(w.memory)
    return out


def decode_allocator(f: list[Any]) -> AllocatorReading:
    return _checked(_decode_allocator, f)
