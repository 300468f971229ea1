"""The rows of the ops and copies tables, one type each for every source: a live session's op
windows, an imported trace and a trace read directly all give these."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OpRow:
    """One line of an ops table: an op (or kernel) name on one device, in one stage (a trace
    read directly has no stages: ``""``)."""

    name: str
    device: str  # cpu | cuda
    count: int
    total_us: float
    self_us: float
    stage: str = ""
    shapes: str | None = None  # the shapes that took the most self time, if recorded

    @property
    def mean_us(self) -> float:
        return self.total_us / self.count if self.count else 0.0


@dataclass(frozen=True, slots=True)
class MemcpyRow:
    """Copies (or memsets) of one kind from one kind of host memory, summed."""

    kind: str  # HtoD | DtoH | DtoD | HtoH | memset
    host_memory: str  # pageable | pinned | device | unknown
    count: int
    bytes: int
    total_us: float

    @property
    def mean_gbps(self) -> float:
        return self.bytes / (self.total_us * 1e3) if self.total_us > 0 else 0.0
