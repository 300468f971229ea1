"""The ingest worker: one thread that owns the source, pumps it and builds snapshots.

The UI thread never touches the source or the session. It sends commands (``send``) and, when
told a snapshot is ready, takes the newest one (``take``). Snapshots that nobody took in time
are simply replaced, so a slow UI draws the latest picture and never a backlog.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from textual.message import Message

from infertop.analysis.base_profile import BaseProfile
from infertop.analysis.findings.live import StragglerCheck, with_findings
from infertop.analysis.fold import FlameShape
from infertop.analysis.processes.table import process_rows
from infertop.analysis.snapshot import ReplayState, Snapshot, SnapshotCaches, build_snapshot
from infertop.analysis.tail_view import tail_view
from infertop.sources import LiveSource, ReplaySource, Source
from infertop.tui.incidents import LiveIncidents
from infertop.tui.messages import IngestError, RecordingChanged, SnapshotReady

SPEED_MIN, SPEED_MAX = 0.125, 16.0


@dataclass(frozen=True)
class SeekTo:
    position: float  # seconds from the start; inf means the end


@dataclass(frozen=True)
class SeekBy:
    delta: float


@dataclass(frozen=True)
class TogglePlay:
    pass


@dataclass(frozen=True)
class ScaleSpeed:
    factor: float


@dataclass(frozen=True)
class SetStageFilter:
    stage: str | None


@dataclass(frozen=True)
class SetTimeView:
    view: str  # "wall" or "cpu" (docs/stages.md)


@dataclass(frozen=True)
class SetProcess:
    pid: int | None  # None: every process followed, merged


@dataclass(frozen=True)
class SetFlameShape:
    fold: bool  # plumbing frames folded into their callers
    lines: bool  # False: function-level frames


@dataclass(frozen=True)
class SetTails:
    on: bool  # the tail view is open: compute each stage's tail (a join of samples to calls)


@dataclass(frozen=True)
class StartRecording:
    path: str


@dataclass(frozen=True)
class StopRecording:
    pass


@dataclass(frozen=True)
class SaveIncident:
    """Live: save the last incident the trigger marked (key ``x``) into ``out_dir``."""

    out_dir: str = "."


@dataclass(frozen=True)
class MemorySnapshot:
    """Live: ask the agent for a CUDA memory snapshot (key ``m``) written to ``path``."""

    path: str
    seconds: float = 10.0


@dataclass(frozen=True)
class _Stop:
    pass


Command = (
    SeekTo | SeekBy | TogglePlay | ScaleSpeed | SetStageFilter | StartRecording | StopRecording
    | SetProcess | SetTimeView | SetFlameShape | SetTails | SaveIncident | MemorySnapshot
)


def describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class IngestWorker:
    """Pumps ``source`` every ``interval`` seconds on its own thread and publishes snapshots."""

    def __init__(
        self,
        source: Source,
        post: Callable[[Message], object],
        interval: float = 0.25,
        base: BaseProfile | None = None,
    ) -> None:
        self.source = source
        self.replay = isinstance(source, ReplaySource)
        self.interval = interval
        self._post = post
        self._commands: queue.SimpleQueue[Command | _Stop] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._latest: Snapshot | None = None
        self._posted = False
        self._thread: threading.Thread | None = None
        self._caches = SnapshotCaches()
        self._stage_filter: str | None = None
        self._time_view = "wall"
        self._process: int | None = None
        self._shape = FlameShape(patterns=source.config.fold_frames)
        self._tails = False  # the tail view is open (SetTails)
        self._base = base  # replay --base: the differential flame's reference
        self._stragglers = StragglerCheck()
        self._error: str | None = None
        self._history = source.config.collect.history_windows
        self._thresholds = source.config.findings
        self.final: Snapshot | None = None  # the last snapshot, built after the source stopped
        #: live: the incident trigger over the session's stage calls, and its ring
        self.incidents = LiveIncidents(source) if isinstance(source, LiveSource) else None

    # -- UI side ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="infertop-ingest", daemon=True)
        self._thread.start()

    def send(self, command: Command) -> None:
        """Queue a command; it is applied within milliseconds. Never blocks."""
        self._commands.put(command)

    def take(self) -> Snapshot | None:
        """The newest snapshot (None if there is none yet); allows the next ``SnapshotReady``."""
        with self._lock:
            self._posted = False
            return self._latest

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the thread; the source is stopped (and its recording closed) on the way out."""
        if self._thread is None:
            return
        self._commands.put(_Stop())
        self._thread.join(timeout)
        self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- worker side ----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._guard("cannot start", self.source.start)
            self._loop()
        finally:
            if self.incidents is not None:
                self._guard("cannot close the incident", self.incidents.close)
            self._guard("cannot stop", self.source.stop)
            try:
                self.final = self._build()
            except Exception:
                self.final = self._latest

    def _loop(self) -> None:
        dirty = True
        next_tick = time.monotonic()
        while True:
            try:
                cmd: Command | _Stop | None = self._commands.get(
                    timeout=max(0.0, next_tick - time.monotonic())
                )
            except queue.Empty:
                cmd = None
            if cmd is not None:
                # apply everything that is waiting, then redraw at once (keys feel instant)
                while cmd is not None:
                    if isinstance(cmd, _Stop):
                        return
                    self._guard("command failed", self._apply, cmd)
                    try:
                        cmd = self._commands.get_nowait()
                    except queue.Empty:
                        cmd = None
                self._publish()
                continue
            now = time.monotonic()
            next_tick = max(next_tick + self.interval, now)
            try:
                if self.source.pump():
                    dirty = True
                if self.incidents is not None:  # a new incident, or one saved: redraw
                    now = time.time()
                    seen = self.incidents.note(now)
                    self.incidents.check(now)
                    dirty = dirty or self.incidents.note(now) != seen
            except Exception as exc:  # noqa: BLE001 - shown in the status line
                self._set_error(f"ingest: {describe(exc)}")
                continue
            if dirty and self._publish():
                dirty = False
                if self._error and self._error.startswith(("ingest:", "cannot build view:")):
                    self._set_error(None)  # recovered

    def _guard(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn``; an exception becomes a status-line error instead of killing the thread."""
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - shown to the user, never raised
            self._set_error(f"{what}: {describe(exc)}")

    def _set_error(self, text: str | None) -> None:
        if text != self._error:
            self._error = text
            self._post(IngestError(text))

    def _publish(self) -> bool:
        try:
            snap = self._build()
        except Exception as exc:  # noqa: BLE001
            self._set_error(f"cannot build view: {describe(exc)}")
            return False
        with self._lock:
            self._latest = snap
            post = not self._posted
            self._posted = True
        if post:
            self._post(SnapshotReady())
        return True

    def _build(self) -> Snapshot:
        src = self.source
        live = src if isinstance(src, LiveSource) else None
        played = src if isinstance(src, ReplaySource) else None
        t_shown = played.t if played is not None else None  # None: live, the newest
        writer = live.writer if live is not None else None
        notes = tuple(src.notes)
        if writer is not None and writer.failed:
            notes += (writer.failed,)
        incident = self.incidents.note(time.time()) if self.incidents is not None else None
        if incident is not None:
            notes += (incident,)
        replay = (
            ReplayState(played.position, played.length, played.playing, played.speed, played.marks)
            if played is not None
            else None
        )
        snap = build_snapshot(
            src.session,
            t=t_shown,
            stage_filter=self._stage_filter,
            history=self._history,
            caches=self._caches,
            process=self._process,
            recording=live.recording_path if live is not None else None,
            recording_bytes=writer.bytes_written if writer is not None else 0,
            replay=replay,
            notes=notes,
            view=self._time_view,
            shape=self._shape,
            tails=dict(src.config.slow_ms) if self._tails else None,
        )
        if self._tails:  # the tail view's flames, of the same shape as the main flame
            session = src.session
            stacks = session.symbols.stack_frames
            frames_of = self._caches.shapes.get(id(session), self._shape, stacks)
            samples = session.call_samples
            view = tail_view(
                snap.tails, frames_of, session.stage_of, session.threads, samples.n, samples.rate_hz
            )
            snap = replace(snap, ui=replace(snap.ui, tail_view=view))
        if self._base is not None:  # its shares under the same shape and filter, built once
            shares = self._base.shares(self._shape, self._stage_filter)
            snap = replace(snap, ui=replace(snap.ui, base=shares, base_path=self._base.path))
        if snap.processes:  # the process selector's numbers
            rows = process_rows(src.session, snap.processes, t_shown)
            snap = replace(snap, ui=replace(snap.ui, process_rows=rows))
        extra = [] if snap.process is not None else self._stragglers.findings(
            src.session, t_shown, self._thresholds
        )  # fmt: skip
        return with_findings(snap, self._thresholds, extra)  # here, off the UI thread

    def _apply(self, cmd: Command) -> None:
        src = self.source
        if isinstance(cmd, SetStageFilter):
            self._stage_filter = cmd.stage
        elif isinstance(cmd, SetTimeView):
            self._time_view = cmd.view
        elif isinstance(cmd, SetProcess):
            self._process = cmd.pid
        elif isinstance(cmd, SetFlameShape):
            self._shape = replace(self._shape, fold=cmd.fold, lines=cmd.lines)
        elif isinstance(cmd, SetTails):
            self._tails = cmd.on
        elif isinstance(cmd, (StartRecording, StopRecording)):
            if isinstance(src, LiveSource):
                self._apply_recording(src, cmd)
        elif isinstance(cmd, SaveIncident):
            if self.incidents is not None:
                self.incidents.save(cmd.out_dir)
        elif isinstance(cmd, MemorySnapshot):
            for c in src.collectors if isinstance(src, LiveSource) else ():
                ask = getattr(c, "memory_snapshot", None)  # the agent's (AgentAttach)
                if ask is not None:
                    ask(cmd.seconds, cmd.path)  # what came of it: the agent's status line
                    break
        elif not isinstance(src, ReplaySource):
            return
        elif isinstance(cmd, SeekTo):
            src.seek(cmd.position)
        elif isinstance(cmd, SeekBy):
            src.seek(src.position + cmd.delta)
        elif isinstance(cmd, TogglePlay):
            src.toggle_play()
        elif isinstance(cmd, ScaleSpeed):
            src.speed = min(SPEED_MAX, max(SPEED_MIN, src.speed * cmd.factor))

    def _apply_recording(self, src: LiveSource, cmd: StartRecording | StopRecording) -> None:
        if isinstance(cmd, StartRecording):
            try:
                src.start_recording(cmd.path)
            except Exception as exc:  # noqa: BLE001 - e.g. an unwritable directory
                self._post(RecordingChanged(cmd.path, False, error=str(exc)))
                return
            self._post(RecordingChanged(cmd.path, True))
        else:
            path = src.recording_path
            size = src.writer.bytes_written if src.writer is not None else 0
            src.stop_recording()
            if path is not None:
                # the exit marker (if any) is written on close; report the final size
                try:
                    size = os.path.getsize(path)
                except OSError:
                    pass
                self._post(RecordingChanged(path, False, size=size))
