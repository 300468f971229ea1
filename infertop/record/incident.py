"""``watch``'s flight recorder: the last seconds of a live session in memory, and an incident
written from them as a normal recording.

``EventRing`` is fed every batch of interned events (``LiveSource.listeners``). It keeps two
things apart:

- **definitions** (the target, stage rules, processes, threads, frames, stacks, the latest
  status of each collector, the target's exit), never dropped: every later incident needs
  them, however old;
- **timed events** (sample windows, stage spans, op windows, allocator and NVML readings,
  markers, statuses), bounded by time (``keep_s``) and, defensively, by count and by an
  estimate of their size; what the count or size bound drops early is counted (``dropped``).

``Incident`` is one incident file being written: the definitions, a ``recording started``
marker, the timed events from ``before`` seconds before the trigger, the trigger's ``Marker``
("incident: ..."), then the live batches until ``after`` seconds past it. It is written as
``NAME.part`` and renamed to ``NAME`` when complete, so a finished name is a finished file.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterable, Sequence

from infertop.model.engine import EngineStats
from infertop.model.events import (
    INCIDENT,
    AllocatorReading,
    CollectorStatus,
    CpuWait,
    Event,
    FrameDef,
    GenerationCall,
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
from infertop.model.gpu import GpuReading
from infertop.model.host_memory import HostMemoryReading, ObjectCensus
from infertop.record.clock import started_marker
from infertop.record.writer import RecordingWriter

MAX_EVENTS = 2_000_000  # timed events kept at most, whatever keep_s says
MAX_BYTES = 512 * 1024 * 1024  # and at most about this much of them (``weight``)
CHUNK = 2_000  # events per record when the ring is written out


def event_time(ev: Event) -> float | None:
    """When a timed event happened (its end for a span of time); None for a definition."""
    match ev:
        case SampleWindow() | StageSpan() | OpWindow() | GenerationCall() | CpuWait() | EngineStats():
            return ev.t_end
        case CollectorStatus() | Marker() | AllocatorReading() | GpuReading() | HostMemoryReading():
            return ev.t
        case ObjectCensus():
            return ev.t
    return None


def weight(ev: Event) -> int:
    """About how many bytes an event holds in memory (the ring's size bound, not exact)."""
    match ev:
        case SampleWindow():
            return 120 + 40 * len(ev.counts)
        case OpWindow():
            rows = len(ev.paths) + len(ev.kernels) + len(ev.memcpy) + len(ev.syncs)
            return 400 + 160 * rows + 120 * len(ev.annotations)
        case GpuReading():
            return 120 + 400 * len(ev.devices)
    return 100


class EventRing:
    """The last ``keep_s`` seconds of timed events, and every definition ever seen."""

    def __init__(
        self, keep_s: float, max_events: int = MAX_EVENTS, max_bytes: int = MAX_BYTES
    ) -> None:
        self.keep_s = keep_s
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._timed: deque[tuple[float, Event, int]] = deque()
        self.bytes = 0
        self.dropped = 0  # timed events the count or size bound dropped before keep_s
        self.newest = float("-inf")
        # the definitions
        self._targets: list[TargetInfo] = []
        self._rules: StageRules | None = None
        self._processes: dict[int, ProcessDef] = {}
        self._threads: dict[int, ThreadDef] = {}
        self._frames: dict[int, FrameDef] = {}
        self._stacks: dict[int, StackDef] = {}
        self._statuses: dict[str, CollectorStatus] = {}
        self._exited: TargetExited | None = None

    def __len__(self) -> int:
        return len(self._timed)

    def add(self, events: Iterable[Event], now: float | None = None) -> None:
        """Take a batch; then drop what is older than ``keep_s`` before ``now`` (default: the
        newest event time seen). An event stamped after ``now`` (another clock) counts as
        of ``now``, so that none outstays ``keep_s``."""
        for ev in events:
            t = event_time(ev)
            if t is None:
                self._define(ev)
                continue
            if now is not None and t > now:
                t = now
            if isinstance(ev, CollectorStatus):
                self._statuses[ev.collector] = ev
            w = weight(ev)
            self._timed.append((t, ev, w))
            self.bytes += w
            if t > self.newest:
                self.newest = t
        self.trim(self.newest if now is None else now)

    def _define(self, ev: Event) -> None:
        match ev:
            case FrameDef():
                self._frames[ev.frame_id] = ev
            case StackDef():
                self._stacks[ev.stack_id] = ev
            case ThreadDef():
                self._threads[ev.tid] = ev
            case ProcessDef():
                self._processes[ev.pid] = ev
            case TargetInfo():
                if ev not in self._targets:  # the session merges them in order (pid, torch...)
                    self._targets.append(ev)
            case StageRules():
                self._rules = ev
            case TargetExited():
                self._exited = ev

    def trim(self, now: float) -> None:
        timed, cutoff = self._timed, now - self.keep_s
        while timed and timed[0][0] < cutoff:
            self.bytes -= timed.popleft()[2]
        while timed and (len(timed) > self.max_events or self.bytes > self.max_bytes):
            self.bytes -= timed.popleft()[2]
            self.dropped += 1

    @property
    def oldest(self) -> float | None:
        """The time of the first timed event kept (about the oldest: they come nearly in order)."""
        return self._timed[0][0] if self._timed else None

    def definitions(self) -> list[Event]:
        """Every definition, in an order a reader accepts (frames before the stacks that name
        them, each by id)."""
        out: list[Event] = list(self._targets)
        if self._rules is not None:
            out.append(self._rules)
        out += self._processes.values()
        out += self._threads.values()
        out += [self._frames[i] for i in sorted(self._frames)]
        out += [self._stacks[i] for i in sorted(self._stacks)]
        out += self._statuses.values()
        if self._exited is not None:
            out.append(self._exited)
        return out

    def since(self, t: float) -> list[Event]:
        """The timed events at or after ``t``, in the order they came."""
        return [ev for tt, ev, _ in self._timed if tt >= t]


def incident_marker(t: float, trigger: str, reason: str, before: float, after: float) -> Marker:
    """The trigger's moment on the timeline: ``incident: REASON`` (docs/watch.md)."""
    extra = {"trigger": trigger, "before_s": f"{before:g}", "after_s": f"{after:g}"}
    return Marker(t, f"{INCIDENT}{reason}", extra)


class Incident:
    """One incident being written (see the module); ``write`` the live batches until
    ``due(now)``, then ``close``. A write error (a full disk) is in ``failed``."""

    def __init__(
        self,
        path: str,
        ring: EventRing,
        marker: Marker,
        before: float,
        after: float,
    ) -> None:
        self.path = path
        self.t = marker.t
        self.ends = marker.t + after
        self.writer = RecordingWriter(path + ".part")
        start = marker.t - before
        self.writer.write(ring.definitions() + [started_marker(start)])
        past = ring.since(start)
        for i in range(0, len(past), CHUNK):
            self.writer.write(past[i : i + CHUNK])
        self.writer.write([marker])
        self.closed = False

    @property
    def failed(self) -> str | None:
        return self.writer.failed

    @property
    def bytes_written(self) -> int:
        return self.writer.bytes_written

    def write(self, batch: Sequence[Event]) -> None:
        self.writer.write(batch)

    def due(self, now: float) -> bool:
        return now >= self.ends

    def close(self) -> str:
        """Finish the file and give it its name; the path it has now."""
        if not self.closed:
            self.closed = True
            self.writer.close()
            try:
                os.replace(self.writer.path, self.path)
            except OSError:
                return self.writer.path  # still readable under its .part name
        return self.path


def utc(t: float, compact: bool = False) -> str:
    fmt = "%Y%m%dT%H%M%SZ" if compact else "%Y-%m-%dT%H:%M:%SZ"
    return time.strftime(fmt, time.gmtime(t))


def incident_path(out_dir: str, t: float) -> str:
    """``DIR/incident-<UTC time>.infertop``, with ``-2``, ``-3`` ... when that name is taken."""
    base = os.path.join(out_dir, f"incident-{utc(t, compact=True)}")
    path, n = base + ".infertop", 1
    while os.path.exists(path) or os.path.exists(path + ".part"):
        n += 1
        path = f"{base}-{n}.infertop"
    return path
