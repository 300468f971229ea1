"""Where a session's events come from: a live target or a recording. Views see no difference.

``LiveSource`` runs the collectors, interns their data into the session and appends it to a
recording when one is on. ``ReplaySource`` feeds a recording's events into a fresh session up
to a playhead that plays, pauses and seeks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from infertop.analysis.session import Session
from infertop.analysis.stages import StageClassifier
from infertop.collect.base import Collector
from infertop.collect.nvml import probe_nvml
from infertop.collect.pyspy import PySpyCollector
from infertop.config import Config
from infertop.model.engine import EngineStats
from infertop.model.events import (
    INCIDENT,
    AllocatorReading,
    CallSamples,
    CollectorStatus,
    CpuWait,
    Event,
    FrameDef,
    GcPause,
    GenerationCall,
    LoopLag,
    Marker,
    OpWindow,
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
from infertop.record.reader import Recording
from infertop.record.writer import RecordingWriter


class LiveSource:
    """Collectors into a session (and a recording when one is on)."""

    kind = "live"

    def __init__(
        self,
        target: TargetInfo,
        config: Config,
        collectors: Sequence[Collector] | None = None,
        record_path: str | None = None,
        notes: Sequence[str] = (),
        statuses: Sequence[CollectorStatus] = (),
    ) -> None:
        self.config = config
        # bounded: older detail folded into summaries (the recording keeps everything)
        self.session = Session(
            classifier=StageClassifier(config.stage_rules), retain_s=config.collect.retain_s
        )
        self.session.apply(target)
        nvml = next((c for c in collectors or () if getattr(c, "name", None) == "nvml"), None)
        # the GPU panel says from the first frame whether there is a GPU, and if not, why
        self.session.apply(nvml.status() if nvml is not None else probe_nvml())  # type: ignore[attr-defined]
        for status in statuses:  # what the caller already knows (e.g. "agent: --no-inject")
            self.session.apply(status)
        self.collectors: list[Collector] = list(
            collectors
            if collectors is not None
            else [
                PySpyCollector(
                    target.pid or 0,  # without collectors a pid is given
                    config.collect.rate_hz,
                    config.collect.window_s,
                    cpu_every=config.collect.cpu_every,
                    realtime=config.collect.realtime,
                )
            ]
        )
        self.notes = tuple(notes)
        self.writer: RecordingWriter | None = None
        self.recorded: list[str] = []  # every recording this session wrote, in order
        #: called with each batch ``pump`` moved into the session (``watch``'s ring)
        self.listeners: list[Callable[[list[Event]], None]] = []
        if record_path:
            self.start_recording(record_path)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        for c in self.collectors:
            c.start()

    def stop(self) -> None:
        for c in self.collectors:
            c.stop()
        self.pump()  # what the collectors flushed on the way out
        self.stop_recording()

    def pump(self) -> bool:
        """Move new collector data into the session (and the recording). True if anything came."""
        batch: list[Event] = []
        for c in self.collectors:
            for raw in c.poll():
                for ev in self.session.intern(raw):
                    self.session.apply(ev)
                    batch.append(ev)
        if batch and self.writer is not None:
            self.writer.write(batch)
        if batch:
            for listener in self.listeners:
                listener(batch)
        return bool(batch)

    @property
    def done(self) -> bool:
        return self.session.exited is not None

    # -- recording --------------------------------------------------------------------------
    @property
    def recording_path(self) -> str | None:
        return self.writer.path if self.writer else None

    def start_recording(self, path: str) -> None:
        """Start writing; a recording begun mid-session starts with everything defined so far."""
        self.stop_recording()
        self.writer = RecordingWriter(path)
        self.recorded.append(path)
        prelude = self.definitions()
        prelude.append(started_marker(time.time()))  # with the clock anchor (record/clock.py)
        self.writer.write(prelude)

    def definitions(self) -> list[Event]:
        """Everything defined so far, as events: the target, the stage rules, processes,
        threads, frames, stacks and collector statuses (what a recording begun now needs)."""
        s = self.session
        out: list[Event] = [s.target, StageRules(self.config.stage_rules)]
        out += list(s.processes.values())
        out += [ThreadDef(t, name, s.thread_pid.get(t, 0)) for t, name in s.threads.items()]
        out += [FrameDef(i, f) for i, f in enumerate(s.symbols.frames)]
        out += [StackDef(i, st) for i, st in enumerate(s.symbols.stacks)]
        out += list(s.statuses.values())
        return out

    def stop_recording(self) -> None:
        if self.writer is not None:
            if self.session.exited is not None:
                self.writer.write([self.session.exited])
            self.writer.close()
            self.writer = None


def event_time(ev: Event) -> float | None:
    """When an event happened, for replay; None for definitions (they take the next time)."""
    match ev:
        case SampleWindow() | StageSpan() | OpWindow() | GcPause() | GenerationCall() | CpuWait() | EngineStats():
            return ev.t_end
        case CollectorStatus() | TargetExited() | Marker() | AllocatorReading() | GpuReading():
            return ev.t
        case HostMemoryReading() | ObjectCensus():
            return ev.t
        case LoopLag():
            return ev.t + ev.lag_s  # when it was seen
        case CallSamples():
            return ev.samples[-1][1] if ev.samples else None
    return None


class ReplaySource:
    """Plays a recording into a session; the playhead is seconds from the recording's start."""

    kind = "replay"

    def __init__(self, recording: Recording, config: Config) -> None:
        self.recording = recording
        self.config = config
        self.events = recording.events
        # each untimed event (definitions) takes the time of the next timed one
        times: list[float] = []
        pending = 0
        last = 0.0
        for ev in self.events:
            t = event_time(ev)
            if t is None:
                pending += 1
                continue
            times.extend([t] * (pending + 1))
            pending = 0
            last = t
        times.extend([last] * pending)
        self.times = times
        starts = [e.t_start for e in self.events if isinstance(e, (SampleWindow, OpWindow))]
        target = next((e for e in self.events if isinstance(e, TargetInfo)), None)
        self.t0 = min(starts) if starts else (target.started if target else 0.0)
        self.t1 = max((t for t in times), default=self.t0)
        self.t1 = max(self.t1, self.t0)
        recorded = next((e.rules for e in self.events if isinstance(e, StageRules)), ())
        #: rules given now win over the rules the recording was made with
        self.rules = tuple(config.stage_rules) + tuple(recorded)
        self.playing = False
        self.speed = 1.0
        #: the incidents' moments (a trigger's marker: watch's incident files, a live UI's
        #: recording), seconds from the start
        self.marks = tuple(
            ev.t - self.t0 for ev in self.events if isinstance(ev, Marker) and ev.text.startswith(INCIDENT)
        )
        self._last_wall = time.monotonic()
        self.position = 0.0
        self.notes: tuple[str, ...] = (recording.warning,) if recording.warning else ()
        self._reset()
        self.seek(self.length)  # open at the end: the whole recording, like a finished live view

    @property
    def length(self) -> float:
        return self.t1 - self.t0

    def _reset(self) -> None:
        self.session = Session(classifier=StageClassifier(self.rules))
        self._next = 0

    def seek(self, position: float) -> None:
        position = min(max(0.0, position), self.length)
        if position < self.position or self._next == 0:
            self._reset()
        self.position = position
        self._advance_to(self.t0 + position)

    def _advance_to(self, t: float) -> None:
        s, events, times = self.session, self.events, self.times
        i = self._next
        while i < len(events) and times[i] <= t + 1e-9:
            s.apply(events[i])
            i += 1
        self._next = i

    def toggle_play(self) -> None:
        if not self.playing and self.position >= self.length:
            self.seek(0.0)
        self.playing = not self.playing
        self._last_wall = time.monotonic()

    def pump(self) -> bool:
        now = time.monotonic()
        elapsed, self._last_wall = now - self._last_wall, now
        if not self.playing:
            return False
        self.seek(self.position + elapsed * self.speed)
        if self.position >= self.length:
            self.playing = False
        return True

    @property
    def t(self) -> float:
        return self.t0 + self.position

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    @property
    def done(self) -> bool:
        return False


#: what the UI and its ingest worker are given: either kind, told apart with ``isinstance``
Source = LiveSource | ReplaySource
