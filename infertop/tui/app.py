"""The infertop live (and replay) terminal UI.

The app draws snapshots; it never pumps the source or builds one itself. An ``IngestWorker``
thread does that and posts ``SnapshotReady``; the app takes the newest snapshot and assigns it
to the widgets. Keys only put commands on the worker's queue, so they are answered at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches

from infertop.analysis.base_profile import BaseProfile
from infertop.analysis.snapshot import Snapshot
from infertop.analysis.stages import IDLE
from infertop.config import STAGES
from infertop.sources import LiveSource, ReplaySource, Source
from infertop.tui.ingest import (
    IngestWorker,
    MemorySnapshot,
    SaveIncident,
    ScaleSpeed,
    SeekBy,
    SeekTo,
    SetFlameShape,
    SetProcess,
    SetStageFilter,
    SetTails,
    SetTimeView,
    StartRecording,
    StopRecording,
    TogglePlay,
)
from infertop.tui.keys import (
    APP_BINDINGS,
    KEY_NAMES,
    LIVE_BINDINGS,
    MEMORY_SNAPSHOT_S,
    REPLAY_BINDINGS,
)
from infertop.tui.messages import IngestError, RecordingChanged, SnapshotReady
from infertop.tui.palette import human_bytes
from infertop.tui.screens.findings import FindingsScreen, Jump
from infertop.tui.screens.help import HelpScreen
from infertop.tui.screens.processes import ProcessesScreen
from infertop.tui.screens.tail import TailScreen
from infertop.tui.widgets.flame import VIEW_TITLES, VIEWS, FlameList
from infertop.tui.widgets.flame_panel import FlamePanel
from infertop.tui.widgets.gpu import GpuPanel
from infertop.tui.widgets.key_bar import KeyBar
from infertop.tui.widgets.memory import MemoryPanel
from infertop.tui.widgets.stages import StagePanel
from infertop.tui.widgets.status import StatusLine
from infertop.tui.widgets.timeline import Timeline

COMPACT_BELOW = 32  # rows: under this the panels drop their side borders

class InfertopApp(App[None]):
    """Stage panel and flame view over a live target or a recording."""

    CSS_PATH = "infertop.tcss"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS = APP_BINDINGS

    def __init__(
        self,
        source: Source,
        *,
        title: str,
        on_exit: Callable[[Snapshot | None], None] | None = None,
        interval: float = 0.25,
        base: BaseProfile | None = None,
    ) -> None:
        super().__init__()
        self.title = title
        self.source = source
        self.replay = isinstance(source, ReplaySource)
        self.compact = False
        self._on_exit = on_exit
        # read before the worker owns the source
        self._target_pid = source.session.target.pid
        self._preset_record_path = source.recording_path if isinstance(source, LiveSource) else None
        self._recording = self._preset_record_path is not None
        self._replay_path = source.recording.path if isinstance(source, ReplaySource) else None
        self.worker = IngestWorker(source, self.post_message, interval, base=base)
        self.latest: Snapshot | None = None  # newest snapshot from the worker
        self.displayed: Snapshot | None = None  # the one the panels show (differs while paused)
        self.paused = False
        self.stage_filter: str | None = None
        self.time_view = "wall"  # the stage panel's view of time (key c)
        self.fold = True  # the flame's plumbing frames folded (key z)
        self.lines = True  # the flame's frames per line, not per function (key n)
        self.process: int | None = None  # --children: the process shown (None: all merged)
        self.view = VIEWS[0]  # what the lower panel shows
        self._view_chosen = False  # the user picked a view (o): never switch it for them
        self.error: str | None = None

    # -- layout -------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Vertical(id="main"):
            yield StagePanel(id="stages")
            with Horizontal(id="resources"):  # host memory beside the GPU, once it is read
                yield GpuPanel(id="gpu")
                yield MemoryPanel(id="memory")
            yield FlamePanel(id="flame")
        if self.replay:
            yield Timeline(id="timeline")
        yield StatusLine(id="status")
        yield KeyBar(id="keys")

    def on_mount(self) -> None:
        self.query_one("#stages", StagePanel).border_title = Text(self.title)
        self.query_one("#flame", FlamePanel).border_title = "flame · session"
        self._set_compact(self.size.height)
        self.query_one(StatusLine).replay_path = self._replay_path
        self.query_one(FlameList).focus()
        self.worker.start()

    def on_resize(self, event: events.Resize) -> None:
        self._set_compact(event.size.height)

    def _set_compact(self, height: int) -> None:
        self.compact = height < COMPACT_BELOW
        self.screen.set_class(self.compact, "-compact")

    def on_unmount(self) -> None:
        self.worker.stop()
        if self._on_exit is not None:
            self._on_exit(self.worker.final or self.latest)

    # -- snapshots from the worker --------------------------------------------------------------
    def on_snapshot_ready(self, _message: SnapshotReady) -> None:
        snap = self.worker.take()
        if snap is None:
            return
        self.latest = snap
        self._draw(snap)

    def _draw(self, snap: Snapshot, tries: int = 20) -> None:
        try:
            self.query_one(StatusLine).show(snap)
            frozen = self.paused and self.displayed is not None
            screen = self.screen
            if isinstance(screen, TailScreen) and (not frozen or not screen.tails):
                screen.show(snap)  # paused: the view keeps its picture once it has one
            same = frozen and snap.stage_filter == self.displayed.stage_filter  # type: ignore[union-attr]
            if same and snap.view == self.displayed.view:  # type: ignore[union-attr]
                return  # paused: collection goes on, the panels keep their picture
            self._show_panels(snap)
        except NoMatches:
            # the screen is not composed yet (or is being torn down at exit): draw the newest
            # snapshot a moment later rather than lose it (a paused replay sends no other)
            if tries > 0:
                self.set_timer(0.05, lambda: self._draw(self.latest or snap, tries - 1))

    def _show_panels(self, snap: Snapshot) -> None:
        self.displayed = snap
        stages = self.query_one(StagePanel)
        stages.show(snap)
        # timed stage calls: their slow ones are explained in the tail view
        stages.border_subtitle = "l: slow calls" if any(s.latency_ms for s in snap.totals) else ""
        self.query_one(GpuPanel).show(snap)
        self.query_one(MemoryPanel).show(snap)
        self.query_one(FlamePanel).show(snap)
        if self.replay:
            self.query_one(Timeline).show(snap.replay)
        self._show_findings(snap)
        sampling = any(st.collector == "py-spy" and st.state == "running" for st in snap.statuses)
        if not self._view_chosen and snap.torch.windows and not snap.samples and not sampling:
            # torch ops but no Python samples (an imported trace, py-spy denied): show the ops
            # (live, the agent's first window may come before py-spy's: that is not it)
            self._view_chosen = True
            if self.view == "python":
                self.show_view("ops")

    def on_ingest_error(self, message: IngestError) -> None:
        self.error = message.text
        self.query_one(StatusLine).set_flags(error=message.text)

    def on_recording_changed(self, message: RecordingChanged) -> None:
        if message.error:
            self._recording = False
            self.notify(
                message.error, title="cannot record", severity="error", timeout=8, markup=False
            )
        elif message.recording:
            self.notify(f"recording to {message.path}", title="● REC", markup=False)
        else:
            size = human_bytes(message.size)
            self.notify(f"saved {message.path} ({size})", title="recording stopped", markup=False)

    # -- actions ----------------------------------------------------------------------------------
    def action_pause(self) -> None:
        """Live: freeze the panels (collection goes on)."""
        self.paused = not self.paused
        self.query_one(StatusLine).set_flags(paused=self.paused)
        if not self.paused and self.latest is not None and self.latest is not self.displayed:
            self._show_panels(self.latest)

    def action_play(self) -> None:
        self.worker.send(TogglePlay())

    def action_seek(self, delta: float) -> None:
        self.worker.send(SeekBy(float(delta)))

    def action_seek_to(self, position: float) -> None:
        self.worker.send(SeekTo(float(position)))

    def action_seek_end(self) -> None:
        self.worker.send(SeekTo(float("inf")))

    def action_speed(self, factor: float) -> None:
        self.worker.send(ScaleSpeed(float(factor)))

    def action_record(self) -> None:
        if self._recording:
            self._recording = False
            self.worker.send(StopRecording())
        else:
            try:
                path = self.next_record_path()
            except OSError as exc:  # e.g. the current directory was removed
                self.notify(str(exc), title="cannot record", severity="error", markup=False)
                return
            self._recording = True
            self.worker.send(StartRecording(path))

    def action_save_incident(self) -> None:
        self.worker.send(SaveIncident("."))

    def action_memory_snapshot(self) -> None:
        """Key ``m``: a CUDA memory snapshot of the target into the current folder, where
        recordings go (docs/memory-snapshot.md); the agent's status line says when it is written
        or why not."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = os.path.abspath(f"memory-snapshot-{self._target_pid}-{stamp}.pickle")
        self.worker.send(MemorySnapshot(path, MEMORY_SNAPSHOT_S))
        self.notify(
            f"recording the CUDA allocator's history for {MEMORY_SNAPSHOT_S:g} s, then "
            f"writing {path} (the agent's status line says when)",
            title="memory snapshot",
            markup=False,
        )

    def next_record_path(self) -> str:
        """The preset path the first time, else ``infertop-PID-TIME.infertop``; never overwrites."""
        if self._preset_record_path and not os.path.exists(self._preset_record_path):
            return self._preset_record_path
        if self._preset_record_path:
            stem, ext = os.path.splitext(self._preset_record_path)
        else:
            stem = f"infertop-{self._target_pid}-{time.strftime('%Y%m%d-%H%M%S')}"
            ext = ".infertop"
        path, n = stem + ext, 2
        while os.path.exists(path):
            path, n = f"{stem}-{n}{ext}", n + 1
        return path

    def stage_options(self) -> list[str | None]:
        """None (all) then each stage with samples or torch ops in the session, idle excluded
        (no stacks): the known stages in pipeline order, then the user's."""
        snap = self.latest
        names = [s.name for s in snap.totals if s.name != IDLE and s.samples] if snap else []
        names += sorted({r.stage for r in snap.torch.ops} - set(names) - {IDLE}) if snap else []
        return [None, *[s for s in STAGES if s in names], *[s for s in names if s not in STAGES]]

    def action_stage_filter(self) -> None:
        options = self.stage_options()
        i = options.index(self.stage_filter) if self.stage_filter in options else 0
        self.stage_filter = options[(i + 1) % len(options)]
        self.worker.send(SetStageFilter(self.stage_filter))

    def action_time_view(self) -> None:
        """Wall ↔ CPU (the stage panel; findings stay on wall time)."""
        self.time_view = "cpu" if self.time_view == "wall" else "wall"
        self.worker.send(SetTimeView(self.time_view))

    def action_toggle_fold(self) -> None:
        self.fold = not self.fold
        self.worker.send(SetFlameShape(self.fold, self.lines))
        self.notify("flame: call plumbing folded" if self.fold else "flame: every frame shown")

    def action_toggle_lines(self) -> None:
        self.lines = not self.lines
        self.worker.send(SetFlameShape(self.fold, self.lines))
        self.notify("flame: a frame per line" if self.lines else "flame: a frame per function")

    def action_next_process(self) -> None:
        """All processes merged → each process followed (--children) → merged again."""
        snap = self.latest
        if snap is not None and not snap.processes:  # one process: say so, never a silent key
            how = "record" if self.replay else "attach"
            self.notify(
                f"w switches between processes, and this session follows one: {how} with "
                "--children (its child processes too) or give several PIDs",
                title="one process",
                markup=False,
            )
            return
        options: list[int | None] = [None, *(pid for pid, _ in snap.processes)] if snap else [None]
        i = options.index(self.process) if self.process in options else 0
        self.process = options[(i + 1) % len(options)]
        self.worker.send(SetProcess(self.process))

    def action_processes(self) -> None:
        if isinstance(self.screen, ProcessesScreen):
            self.pop_screen()
        elif not isinstance(self.screen, (HelpScreen, FindingsScreen)):
            if not (self.latest and self.latest.processes):
                self.notify("one process: nothing to choose (see --children, or give several PIDs)")
                return
            self.push_screen(ProcessesScreen(self.latest, self.process), self.choose_process)

    def choose_process(self, choice: object) -> None:
        if choice is None:
            return
        self.process = choice if isinstance(choice, int) else None
        self.worker.send(SetProcess(self.process))

    def action_cycle_view(self) -> None:
        """Python flame → torch-ops flame → ops table → Python flame."""
        self._view_chosen = True
        self.show_view(VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)])

    def show_view(self, view: str) -> None:
        self.view = view
        panel = self.query_one(FlamePanel)
        panel.border_title = f"{VIEW_TITLES[self.view]} · session"
        panel.set_view(self.view)

    # -- findings ---------------------------------------------------------------------------
    def _show_findings(self, snap: Snapshot) -> None:
        n = len(snap.findings)
        worst = snap.findings[0].severity if n else ""
        self.query_one(FlamePanel).border_subtitle = (
            f"i: {n} finding{'s' * (n != 1)}, {worst} first" if n else "i: no findings"
        )
        if isinstance(self.screen, FindingsScreen):
            self.screen.show(snap)
        if isinstance(self.screen, ProcessesScreen):
            self.screen.show(snap)

    def action_findings(self) -> None:
        if isinstance(self.screen, FindingsScreen):
            self.pop_screen()
        elif not isinstance(self.screen, HelpScreen):
            self.push_screen(FindingsScreen(self.displayed), self.jump_to)

    def jump_to(self, jump: Jump | None) -> None:
        """Show where a finding happens: its frame in the Python flame, or its row in the
        ops table."""
        if jump is None:
            return
        panel = self.query_one(FlamePanel)
        if jump.frame is not None:
            self.show_view("python")
            found = panel.flame_list.reveal(jump.frame)
        else:
            self.show_view("table")
            found = jump.op is not None and panel.ops_table.reveal(jump.op)
        if not found:
            self.notify(
                f"{jump.describe()} is not in this view (clear the stage filter with s)",
                markup=False,
            )

    # -- the tail view ---------------------------------------------------------------------------
    def action_tail(self) -> None:
        """Open the tail view; the worker computes the tails only while it is open."""
        if isinstance(self.screen, TailScreen):
            self.pop_screen()
            return
        self.worker.send(SetTails(True))
        self.push_screen(TailScreen(self.displayed, self.stage_filter), self._tail_closed)

    def _tail_closed(self, _result: object) -> None:
        self.worker.send(SetTails(False))

    def action_toggle_flame(self) -> None:
        panel = self.query_one(StagePanel)
        panel.display = not panel.display
        self.query_one(GpuPanel).display = panel.display
        memory = self.query_one(MemoryPanel)
        memory.visible_wanted = panel.display
        if memory.snapshot is not None:
            memory.show(memory.snapshot)

    def action_next_gpu(self) -> None:
        self.query_one(GpuPanel).next_device()

    def help_rows(self) -> list[tuple[str, str]]:
        """(keys, what they do) for every binding of this mode, the flame list's included."""
        bindings: list[Binding] = []
        for cls in reversed(type(self).__mro__):
            if issubclass(cls, InfertopApp):
                bindings += cls.__dict__.get("BINDINGS", [])
        rows = []
        for b in [*bindings, *FlameList.BINDINGS]:  # the ops table moves with the same keys
            assert isinstance(b, Binding)
            if "," in b.key:
                keys = " / ".join(KEY_NAMES.get(k, k) for k in b.key.split(","))
            else:
                keys = b.key_display or KEY_NAMES.get(b.key, b.key)
            rows.append((keys, b.tooltip or b.description))
        return rows

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.help_rows(), "replay" if self.replay else "live"))


class LiveApp(InfertopApp):
    """Attached to a running process: pause freezes the display, r records."""

    BINDINGS = LIVE_BINDINGS


class ReplayApp(InfertopApp):
    """Playing a recording: a timeline, play/pause, seek and speed."""

    BINDINGS = REPLAY_BINDINGS


def create_app(
    source: Source,
    *,
    title: str,
    on_exit: Callable[[Snapshot | None], None] | None = None,
    base: BaseProfile | None = None,
) -> InfertopApp:
    """The TUI over ``source`` (a LiveSource or ReplaySource). ``on_exit`` gets the last snapshot
    after the worker has stopped the source (and closed any recording). ``base``: a base
    recording the flame is coloured against (replay --base)."""
    cls = ReplayApp if isinstance(source, ReplaySource) else LiveApp
    return cls(source, title=title, on_exit=on_exit, base=base)
