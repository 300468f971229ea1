"""What torch's allocator reported in a profiled model call (``profile_memory``): the bytes its
stages and ops allocated and its peak (the agent's ``window`` message, field ``memory``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MemoryStage:
    """A stage's allocations on one device in a window: ``calls`` of it (its annotations, or
    for ``forward`` the stretches of model work), the allocations and their bytes, the bytes
    freed, and the largest and summed peaks of its calls (bytes over each call's start)."""

    stage: str
    device: str  # "cpu" | "cuda"
    calls: int
    allocs: int
    alloc_bytes: int
    freed_bytes: int
    peak_max: int
    peak_sum: int


@dataclass(frozen=True, slots=True)
class MemoryOp:
    """The allocations of one op call path (outermost first) in a window: those made in the
    innermost op of the path itself."""

    names: tuple[str, ...]
    stage: str
    device: str
    allocs: int
    alloc_bytes: int


@dataclass(frozen=True, slots=True)
class OpMemory:
    stages: tuple[MemoryStage, ...] = ()
    ops: tuple[MemoryOp, ...] = ()
    #: the profiled call's batch (its first tensor argument's first dimension); None: unknown
    rows: int | None = None
