"""The field-list forms of op windows and allocator readings, decoded and checked.

The agent's wire protocol sends them, and the recording format stores them, laid out the same
way (the recording's ``OPS`` and ``ALLOCATOR`` records are these fields after the record's
code), so both decode them here: any malformation is ``ValueError``, the reader's
damaged-record path and the agent client's bad-message path."""

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


def _checked(fn: Any, f: list[Any]) -> Any:
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


def _decode_op_window(f: list[Any]) -> OpWindow:
    if not isinstance(f[4], bool):
        raise ValueError("truncated is not a bool")
    paths = tuple(
        OpPath(as_names(r[0]), as_str(r[1]), as_str(r[2]), as_int(r[3]), as_num(r[4]), as_num(r[5]),
               as_opt_str(r[6]))
        for r in as_rows(f[5], 7)
    )  # fmt: skip
    kernels = tuple(
        KernelStat(as_str(r[0]), as_str(r[1]), as_int(r[2]), as_num(r[3]), as_num(r[4]), as_num(r[5]))
        for r in as_rows(f[6], 6)
    )
    memcpy = tuple(
        MemcpyStat(as_str(r[0]), as_str(r[1]), as_int(r[2]), as_int(r[3]), as_num(r[4]))
        for r in as_rows(f[7], 5)
    )
    syncs = tuple(SyncStat(as_str(r[0]), as_int(r[1]), as_num(r[2])) for r in as_rows(f[8], 3))
    annotations = tuple(
        Annotation(as_str(r[0]), as_int(r[1]), as_num(r[2]), as_num(r[3])) for r in as_rows(f[9], 4)
    )
    g = f[10]
    if g is not None and (not isinstance(g, list) or len(g) < 3):
        raise ValueError("bad gpu activity")
    gpu = None if g is None else GpuActivity(as_num(g[0]), as_num(g[1]), as_num(g[2]))
    o = f[11] if len(f) > 11 else None  # a trailing field: absent in older windows
    if o is not None and (not isinstance(o, list) or len(o) < 3):
        raise ValueError("bad op time")
    op_time = None
    if o is not None:
        cpu = (as_num(o[3]), as_num(o[4])) if len(o) >= 5 else (None, None)  # 1.x: absent before
        op_time = OpTime(as_int(o[0]), as_num(o[1]), as_num(o[2]), *cpu)
    return OpWindow(
        as_num(f[0]), as_num(f[1]), as_str(f[2]), as_int(f[3]), f[4],
        paths, kernels, memcpy, syncs, annotations, gpu, op_time,
        as_int(f[12]) if len(f) > 12 else 0,
    )  # fmt: skip


def decode_op_window(f: list[Any]) -> OpWindow:
    """An op window from its fields (after the code). The rows are laid out exactly as the
    agent protocol sends them, so the agent client validates its messages with this too."""
    return _checked(_decode_op_window, f)  # type: ignore[no-any-return]


def decode_allocator(f: list[Any]) -> AllocatorReading:
    return _checked(_decode_allocator, f)  # type: ignore[no-any-return]
