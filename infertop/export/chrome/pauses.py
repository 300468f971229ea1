"""GC pauses and event-loop lag in the Chrome export of a recording (the agent's ``GcPause`` and
``LoopLag`` events; docs/export.md).

Each collection is a complete slice (``GC gen N``, its objects collected and pause in ``args``)
on a ``GC · THREAD`` track placed beside the thread's own tracks, so it lines up under the
stage call it interrupted; lanes keep the track nested as the other range tracks are. Each
event loop's heartbeats are a counter, ``event loop lag ms · THREAD``, in its process.
"""

from __future__ import annotations

from collections.abc import Callable

from infertop.export.jsonout import us
from infertop.export.lanes import EndOrderedLanes
from infertop.model.events import GcPause, LoopLag

Emit = Callable[[dict], None]


class PauseEvents:
    """``track_of(tid, lane)``: the Chrome track of a thread's GC lane (named on first use);
    ``pid_of(tid, pid)``: the Chrome process of a thread (``pid``: the event's own, 0 for the
    target); ``thread_name(tid)``: how the thread's tracks are named."""

    def __init__(
        self,
        emit: Emit,
        ns: Callable[[float], int],
        track_of: Callable[[int, int], int],
        pid_of: Callable[[int, int], int],
        thread_name: Callable[[int], str],
    ) -> None:
        self.emit, self.ns = emit, ns
        self.track_of, self.pid_of, self.thread_name = track_of, pid_of, thread_name
        self.lanes: dict[int, EndOrderedLanes] = {}
        self.collections = 0

    @property
    def dropped(self) -> int:
        return sum(lanes.dropped for lanes in self.lanes.values())

    def gc(self, ev: GcPause) -> None:
        s, e = self.ns(ev.t_start), self.ns(ev.t_end)
        if e < s:
            return
        lane = self.lanes.setdefault(ev.tid, EndOrderedLanes()).place(s, e)
        if lane is None:
            return
        self.collections += 1
        self.emit(
            {
                "ph": "X",
                "pid": self.pid_of(ev.tid, ev.pid),
                "tid": self.track_of(ev.tid, lane),
                "ts": us(s),
                "dur": us(e - s),
                "name": f"GC gen {ev.generation}",
                "cat": "gc",
                "args": {
                    "generation": ev.generation,
                    "collected": ev.collected,
                    "pause ms": round((ev.t_end - ev.t_start) * 1000.0, 3),
                },
            }
        )

    def lag(self, ev: LoopLag) -> None:
        self.emit(
            {
                "ph": "C",
                "pid": self.pid_of(ev.tid, ev.pid),
                "tid": 0,
                "ts": us(max(0, self.ns(ev.t))),
                "name": f"event loop lag ms · {self.thread_name(ev.tid)}",
                "args": {"lag": round(ev.lag_s * 1000.0, 3)},
            }
        )
