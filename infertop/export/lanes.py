"""Keeping slices properly nested on every track.

Trace viewers (Perfetto above all) drop slices that overlap on one track without nesting. When
intervals may overlap that way (stage calls on one thread, annotation ranges, a trace's ops), each
goes to the first *lane* of its track where it nests with everything already there; a lane is
one more track named after the first. Times are integers (ns) so that "nests" is exact.
"""

from __future__ import annotations

MAX_LANES = 16
KEEP = 4096  # top-level intervals remembered per lane (older ones only raise the lane's floor)


class StartOrderedLanes:
    """For intervals given in order of start (ties: longer first)."""

    def __init__(self, max_lanes: int = MAX_LANES) -> None:
        self.max_lanes = max_lanes
        self._open: list[list[int]] = []  # per lane, the ends of the open intervals
        self.dropped = 0

    def place(self, start: int, end: int) -> int | None:
        for i, ends in enumerate(self._open):
            while ends and ends[-1] <= start:
                ends.pop()
            if not ends or end <= ends[-1]:
                ends.append(end)
                return i
        if len(self._open) < self.max_lanes:
            self._open.append([end])
            return len(self._open) - 1
        self.dropped += 1
        return None


class EndOrderedLanes:
    """For intervals given (roughly) in order of end, as calls are reported when they return.

    A lane keeps its top-level intervals (disjoint, in order); a new interval either encloses the
    latest of them or follows them. Anything else (it overlaps one partly, or arrives out of
    order) tries the next lane.
    """

    def __init__(self, max_lanes: int = MAX_LANES) -> None:
        self.max_lanes = max_lanes
        self._lanes: list[_EndLane] = []
        self.dropped = 0

    def place(self, start: int, end: int) -> int | None:
        for i, lane in enumerate(self._lanes):
            if lane.take(start, end):
                return i
        if len(self._lanes) < self.max_lanes:
            lane = _EndLane()
            lane.take(start, end)
            self._lanes.append(lane)
            return len(self._lanes) - 1
        self.dropped += 1
        return None


class _EndLane:
    __slots__ = ("ends", "floor", "last_end", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.floor = -(1 << 62)  # everything forgotten ended by here
        self.last_end = -(1 << 62)

    def take(self, start: int, end: int) -> bool:
        if end < self.last_end or start < self.floor:
            return False
        starts, ends = self.starts, self.ends
        k = len(starts)
        while k and starts[k - 1] >= start:  # these become children of the new interval
            k -= 1
        if k and ends[k - 1] > start:  # partly overlaps an earlier one
            return False
        del starts[k:], ends[k:]
        starts.append(start)
        ends.append(end)
        self.last_end = end
        if len(starts) > KEEP:
            drop = len(starts) - KEEP // 2
            self.floor = max(self.floor, ends[drop - 1])
            del starts[:drop], ends[:drop]
        return True
