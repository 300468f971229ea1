"""One immutable picture of the session at a moment: what every view draws from.

Built off the UI thread (live ingest worker, replay, report), then handed to views whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from infertop.analysis.batches import BatchCalls, calls_by_batch
from infertop.analysis.cpu_contention import CpuContention
from infertop.analysis.engine import EngineSummary, engine_of, engine_summary
from infertop.analysis.flame import FlameNode, TopFrame, build_flame, top_frames
from infertop.analysis.fold import FlameShape, ShaperCache
from infertop.analysis.generation import GenerationSummary, summarize_generations
from infertop.analysis.gpu_series import GpuAccumulator, GpuView, gpu_view, memory_summary
from infertop.analysis.host_memory import (
    CallTimes,
    HostMemorySummary,
    call_times,
    summarize_host_memory,
)
from infertop.analysis.ops import (
    GpuWork,
    OpAccumulator,
    TorchMemory,
    device_flame,
    gpu_work,
    ops_table,
)
from infertop.analysis.pause_history import PauseHistory, pause_history
from infertop.analysis.pauses import PauseSummary
from infertop.analysis.processes.shares import exit_times
from infertop.analysis.processes.view import (
    ProcessFilter,
    allocator_of,
    process_labels,
    process_op_totals,
)
from infertop.analysis.requests import RequestSummary, summarize_requests
from infertop.analysis.session import Session
from infertop.analysis.session_tails import session_pauses, session_tails
from infertop.analysis.shares import StageShare, stage_shares
from infertop.analysis.stages import IDLE
from infertop.analysis.tail import StageTail
from infertop.analysis.windows import WindowSummary, WindowTotals
from infertop.model.events import (
    AllocatorReading,
    CollectorStatus,
    OpTime,
    StageSpan,
    TargetExited,
    TargetInfo,
)
from infertop.model.host_memory import ObjectCensus
from infertop.model.rows import OpRow

if TYPE_CHECKING:
    from infertop.analysis.flame_diff import BaseShares
    from infertop.analysis.processes.table import ProcessRow
    from infertop.analysis.tail_view import TailView
    from infertop.model.findings import Finding


@dataclass(frozen=True)
class ReplayState:
    position: float  # seconds from the start of the recording
    length: float
    playing: bool
    speed: float
    #: where the recording's incidents are (seconds from its start): the timeline marks them
    marks: tuple[float, ...] = ()


@dataclass(frozen=True)
class Profiled:
    """What the in-process agent's torch-profiler windows hold up to a snapshot's t, and its
    newest allocator reading."""

    ops: tuple[OpRow, ...] = ()  # every stage, by self time
    device_flame: FlameNode = field(default_factory=lambda: FlameNode(None))  # stage-filtered
    gpu: GpuWork | None = None  # None: no device work seen
    allocator: AllocatorReading | None = None  # the newest reading
    windows: int = 0
    seconds: float = 0.0  # wall time the windows covered
    truncated: int = 0  # windows cut short (max_events reached)
    op_time: OpTime | None = None  # the op thread's time in and between ops, summed
    memory: TorchMemory | None = None  # profile_memory's windows; None: none


@dataclass(frozen=True)
class UiExtras:
    """What the UI's ingest worker adds to a snapshot once it is built, for the views that are
    open; a report's or an export's snapshot has none of it."""

    #: the process selector's rows (key W)
    process_rows: tuple[ProcessRow, ...] = ()
    #: the tail view's flames and thread names while the view is open (None: not asked for)
    tail_view: TailView | None = None
    #: replay --base: the base recording's shares of ``flame``'s call paths (same shape and
    #: stage filter), for the differential flame; None: no base
    base: BaseShares | None = None
    base_path: str | None = None


@dataclass(frozen=True)
class Snapshot:
    t: float
    t_first: float
    target: TargetInfo
    #: in the snapshot's ``view`` ("wall" or "cpu", docs/stages.md)
    totals: tuple[StageShare, ...]  # the session up to t
    recent: tuple[StageShare, ...]  # the last ``recent_s`` seconds
    history: tuple[dict[str, int], ...]  # stage counts per window of the view, oldest first
    flame: FlameNode  # of ``shape``: plumbing folded, line- or function-level frames
    stage_filter: str | None
    top: tuple[TopFrame, ...]
    statuses: tuple[CollectorStatus, ...]
    samples: int
    errors: int
    lag_s: float
    rate_hz: float
    coverage: float  # share of wall time py-spy was sampling (gaps between windows excluded)
    exited: TargetExited | None
    recording: str | None = None
    recording_bytes: int = 0
    replay: ReplayState | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: what the collectors said along the way (Session.status_notes): why windows failed or
    #: changed, each once
    status_notes: tuple[str, ...] = field(default_factory=tuple)
    #: an LLM engine's steps where one is among the processes (analysis/engine.py)
    engine: EngineSummary | None = None
    #: the torch-profiler windows (the in-process agent's) and the allocator, up to t
    torch: Profiled = field(default_factory=Profiled)
    nvml: GpuView | None = None  # NVML readings up to t; None: none (the nvml status says why)
    #: each process's host memory up to t (/proc and its cgroup); None: nothing was read
    host_memory: HostMemorySummary | None = None
    #: each process's threads' waits for a CPU up to t (the kernel's count); None: not read
    cpu: CpuContention | None = None
    findings: tuple[Finding, ...] = ()  # ranked; filled in by findings.live.with_findings
    #: --children: (pid, role) of every process followed; ``process`` is the one the samples
    #: are of (None: all merged)
    processes: tuple[tuple[int, str], ...] = ()
    process: int | None = None
    processes_exited: tuple[int, ...] = ()  # the followed processes seen to exit by t
    view: str = "wall"
    windows: int = 0  # py-spy windows up to t, folded ones included (both kinds)
    #: the session up to t in both views, whichever is shown; ``wall_measured`` false: no wall
    #: windows (a recording made before 1.5, or ``cpu_every = 1``), so wall is the CPU view
    wall_totals: tuple[StageShare, ...] = ()
    cpu_totals: tuple[StageShare, ...] = ()
    wall_measured: bool = False
    shape: FlameShape = field(default_factory=FlameShape)  # of ``flame`` and ``top``
    #: GC pauses and event-loop lag up to t (the agent's); None parts: none seen
    pauses: PauseSummary | None = None
    #: each stage's tail (slow calls against typical ones): only when asked for (``tails``)
    tails: tuple[StageTail, ...] = ()
    #: requests named by ``infertop.stage(..., request=ID)``, with ``tails`` only
    requests: RequestSummary | None = None
    #: the requests of the last ``recent_s`` seconds (the stage panel's requests row)
    recent_requests: RequestSummary | None = None
    #: the generation calls up to t (the agent's); None: none seen
    generation: GenerationSummary | None = None
    #: {stage: its calls by batch size}, for the stages whose calls have batch sizes (forward)
    batches: Mapping[str, tuple[BatchCalls, ...]] = field(default_factory=dict)
    #: GC pause time and the worst event-loop lag per window of ``history`` (the stage
    #: panel's pause rows); None: no pause or heartbeat in those windows
    pause_history: PauseHistory | None = None
    #: what the UI's ingest worker adds for the views that are open (not of the session alone)
    ui: UiExtras = field(default_factory=UiExtras)

    @property
    def duration_s(self) -> float:
        return max(0.0, self.t - self.t_first)


class StackAccumulator:
    """Stack counts over windows [0, n), extended incrementally while the range only grows.

    ``n`` counts from the session's first window; windows a bounded session folded are read
    from its folded stack counts."""

    def __init__(self) -> None:
        self.n = 0
        self.counts: dict[int, int] = {}
        self.session_id = 0

    def upto(self, session: Session, n: int) -> dict[int, int]:
        """Stack counts over the folded windows and the first ``n`` kept ones."""
        base = session.windows_folded
        end = base + n
        if id(session) != self.session_id or end < self.n or self.n < base:
            self.n, self.counts, self.session_id = base, dict(session.folded.stacks), id(session)
        for ws in session.windows[self.n - base : n]:
            if ws.wall:  # the flame and top frames are of CPU windows
                continue
            for _tid, sid, c in ws.window.counts:
                self.counts[sid] = self.counts.get(sid, 0) + c
        self.n = end
        return self.counts


def _sum_stage_counts(
    windows: list[WindowSummary], folded: dict[str, int] | None = None
) -> dict[str, int]:
    out: dict[str, int] = dict(folded or {})
    for ws in windows:
        for s, n in ws.stage_counts.items():
            out[s] = out.get(s, 0) + n
    return out


def _sum_wall_counts(
    windows: list[WindowSummary], folded: dict[str, int] | None = None
) -> dict[str, int]:
    out: dict[str, int] = dict(folded or {})
    for ws in windows:
        for s, n in (ws.wall_counts or {}).items():
            out[s] = out.get(s, 0) + n
    return out


def _view_rate(rate: float, view_s: float, all_s: float) -> float:
    """The rate that turns a view's samples into thread-seconds of the whole sampled time: a
    view's windows cover part of it (wall and CPU windows alternate)."""
    return rate * view_s / all_s if all_s > 0 and view_s > 0 else rate


def working_windows(windows: list[WindowSummary]) -> list[tuple[float, float]] | None:
    """(start, end) of the windows in which the target did work (samples outside idle and
    queue): when the GPU should be busy. None when there are no windows."""
    if not windows:
        return None
    quiet = (IDLE, "queue")
    return [
        (w.window.t_start, w.window.t_end)
        for w in windows
        if any(n for s, n in w.stage_counts.items() if s not in quiet)
    ]


@dataclass
class SnapshotCaches:
    """What a caller that builds snapshot after snapshot of one growing session keeps between
    them (the UI's ingest worker): running stack counts, op totals, GPU series and one
    process's windows, each advanced by what arrived since the last build. Without one, a
    build starts from scratch (a report, a test)."""

    stacks: StackAccumulator = field(default_factory=StackAccumulator)
    ops: OpAccumulator = field(default_factory=OpAccumulator)
    gpu: GpuAccumulator = field(default_factory=GpuAccumulator)
    processes: ProcessFilter = field(default_factory=ProcessFilter)
    shapes: ShaperCache = field(default_factory=ShaperCache)


def _pause_history(
    session: Session, t: float | None, shown: list[WindowSummary], process: int | None
) -> PauseHistory | None:
    if not session.gc_pauses and not session.loop_lags:
        return None
    gc = session.gc_pauses if t is None else [p for p in session.gc_pauses if p.t_end <= t]
    lags = session.loop_lags if t is None else [x for x in session.loop_lags if x.t <= t]
    keep = None
    if process is not None:  # one process's pauses (an agent's own pid 0: the target's)
        target = session.target.pid

        def keep(pid: int) -> bool:
            return pid == process or (pid == 0 and process == target)

    windows = [(w.window.t_start, w.window.t_end) for w in shown]
    return pause_history(gc, lags, windows, keep)


def _host_memory(
    session: Session, t: float | None, spans: list[StageSpan]
) -> HostMemorySummary | None:
    """Each process's host memory up to ``t``, with its growth per timed call (``spans``: the
    stage spans kept; a live session folds older ones, whose calls are not counted)."""
    target = session.target.pid or 0

    def calls() -> dict[int, CallTimes]:
        since = min((sp.t_start for sp in spans), default=None) if session.folded_spans else None
        return call_times(spans, lambda tid: session.thread_pid.get(tid) or target, since)

    censuses: dict[int, list[ObjectCensus]] = {}
    for c in session.censuses:
        if t is None or c.t <= t:
            censuses.setdefault(c.pid or target, []).append(c)
    return summarize_host_memory(session.host_memory_upto(t), calls, censuses)


def _generation(
    session: Session, t: float | None, spans: list[StageSpan], allocator: AllocatorReading | None,
    process: int | None,
) -> GenerationSummary | None:
    """The generation calls up to ``t`` (one process's, with ``process``; ``spans``: the stage
    spans kept, for a slow call's queue wait), the cache's headroom
    from the device memory left: NVML's free memory plus what the allocator reserved and holds
    no tensor in."""
    calls = session.generations_upto(t)
    if process is not None:
        calls = [c for c in calls if (c.pid or session.target.pid) == process]
    if not calls:
        return None
    free = None
    memory = memory_summary(session.gpu_upto(t), allocator, session.gpu_fold)
    reported = memory.get("free") if memory is not None else None
    if isinstance(reported, int):
        free = reported
        if allocator is not None:
            free += max(0, allocator.reserved - allocator.allocated)
    return summarize_generations(calls, spans, free)


def build_snapshot(
    session: Session,
    *,
    t: float | None = None,
    stage_filter: str | None = None,
    recent_s: float = 5.0,
    history: int = 120,
    caches: SnapshotCaches | None = None,
    recording: str | None = None,
    recording_bytes: int = 0,
    replay: ReplayState | None = None,
    notes: tuple[str, ...] = (),
    process: int | None = None,
    view: str = "wall",
    shape: FlameShape | None = None,
    tails: Mapping[str, float] | None = None,
) -> Snapshot:
    """The session at ``t`` (None: its newest moment; replay gives the playhead) as one
    immutable ``Snapshot``: stage shares of both views, the flame (of ``stage_filter`` only,
    if given), top frames, ops, GPU, findings' inputs, the last ``history`` windows for the
    sparkline and the ``recent_s`` seconds the stage panel shows. ``process``: one process of a
    many-process session, its samples and its agent's ops only. ``view``: the stage panel's
    time ("wall" or "cpu"). ``shape``: how the flame and top frames draw stacks (default:
    plumbing folded, line-level frames). ``tails``: compute each stage's tail, with these
    slow thresholds (ms by stage; the p99 for the others); None: no tails (they cost a join of
    samples to calls). ``recording``, ``recording_bytes``, ``replay``, ``notes``: what the
    status line shows, passed through."""
    caches = caches or SnapshotCaches()
    windows = session.windows_between(None, t)
    t_now = t if t is not None else session.t_last
    rate = windows[-1].window.rate_hz if windows else 0.0
    # a bounded session's windows past its horizon, summed (a playhead is never before them:
    # replay's sessions are not bounded)
    folded: WindowTotals = session.folded
    if process is not None and process in session.processes:
        # one process of a many-process session: its samples and its agent's ops only
        windows, stack_counts = caches.processes.windows(
            session, process, len(windows)
        )
        folded = session.folded_by_pid.get(process) or WindowTotals()
    else:
        process = None
        stack_counts = caches.stacks.upto(session, len(windows))
    shape = shape or FlameShape()
    frames_of = caches.shapes.get(id(session), shape, session.symbols.stack_frames)
    duration = max(0.0, t_now - session.t_first)
    latencies = session.span_latencies(t)  # every span so far, folded ones included
    span_list = session.spans_between(None, t) if latencies is None else []
    # the wall view: every window that has one (wall windows, CPU windows after the first
    # wall window: analysis/wall.py); the CPU view: CPU windows
    walled = [w for w in windows if w.wall_counts is not None]
    cpu_windows = [w for w in windows if not w.wall]
    wall_measured = any(w.wall for w in windows) or folded.wall_windows > 0
    sampled = folded.sampled_s + sum(w.window.t_end - w.window.t_start for w in windows)
    wall_s = folded.wall_sampled_s + sum(w.window.t_end - w.window.t_start for w in walled)
    cpu_s = folded.cpu_sampled_s + sum(w.window.t_end - w.window.t_start for w in cpu_windows)
    cpu_totals = stage_shares(
        _sum_stage_counts(cpu_windows, folded.stage_counts), _view_rate(rate, cpu_s, sampled),
        span_list, duration, latencies=latencies,
    )  # fmt: skip
    wall_totals = (
        stage_shares(
            _sum_wall_counts(walled, folded.wall_counts), _view_rate(rate, wall_s, sampled),
            span_list, duration, latencies=latencies,
        )  # fmt: skip
        if wall_measured
        else cpu_totals
    )
    view = "cpu" if view == "cpu" or not wall_measured else "wall"
    shown = walled if view == "wall" else (cpu_windows if wall_measured else windows)
    recent_windows = [w for w in shown if w.window.t_end > t_now - recent_s]
    recent_spans = session.spans_between(t_now - recent_s, t)
    recent = stage_shares(
        _sum_wall_counts(recent_windows) if view == "wall" else _sum_stage_counts(recent_windows),
        rate,
        recent_spans,
        recent_s,
    )
    items = list(stack_counts.items())
    if process is not None:  # its own agent's windows (and allocator) only
        op_totals = process_op_totals(session, process, t)
        allocator = allocator_of(session, process, t)
    else:
        n_ops = len(session.op_windows_between(None, t))
        op_totals = caches.ops.upto(
            session.op_windows, id(session), n_ops, session.folded_ops, session.op_windows_folded
        )
        # merged: the target's allocator beside its NVML memory, when its agent has one
        allocator = session.allocator_at(t)
        if allocator is not None and allocator.pid and session.target.pid is not None:
            allocator = allocator_of(session, session.target.pid, t) or allocator
    working = working_windows(windows)
    if folded.windows:
        working = folded.working + (working or [])
    paths = op_totals.merged_paths()
    kept = span_list or session.spans_between(None, t)  # the spans kept: read once, for three
    labels = process_labels(session) if session.processes else ()
    return Snapshot(
        t=t_now,
        t_first=session.t_first,
        target=session.target,
        totals=tuple(wall_totals if view == "wall" else cpu_totals),
        recent=tuple(recent),
        history=tuple(
            dict(w.wall_counts if view == "wall" and w.wall_counts is not None else w.stage_counts)
            for w in shown[-history:]
        ),
        flame=build_flame(items, frames_of, session.stage_of, stage_filter),
        stage_filter=stage_filter,
        top=tuple(top_frames(items, frames_of, session.stage_of)),
        statuses=tuple(session.statuses.values()),
        status_notes=tuple(session.status_notes),
        samples=folded.active + sum(w.active for w in cpu_windows),
        errors=folded.errors + sum(w.window.errors for w in windows),
        lag_s=windows[-1].window.lag_s if windows else 0.0,
        rate_hz=rate,
        coverage=sampled / duration if duration > 0 else 0.0,
        exited=session.exited if session.exited and (t is None or session.exited.t <= t) else None,
        recording=recording,
        recording_bytes=recording_bytes,
        replay=replay,
        notes=notes,
        torch=Profiled(
            ops=tuple(ops_table(paths)),
            device_flame=device_flame(paths, stage_filter),
            gpu=gpu_work(op_totals),
            allocator=allocator,
            windows=op_totals.windows,
            seconds=op_totals.seconds,
            truncated=op_totals.truncated,
            op_time=op_totals.op_time(),
            memory=op_totals.torch_memory(),
        ),
        nvml=gpu_view(
            session.gpu_upto(t),
            [(w.window.t_start, w.window.t_end) for w in shown[-history:]],
            t_now,
            history,
            caches.gpu,
            id(session),
            working,
            session.gpu_fold,
            process,
        ),
        host_memory=_host_memory(session, t, kept),
        cpu=session.cpu_contention(t, process),
        processes=labels,
        processes_exited=tuple(exit_times(session, t)) if session.processes else (),
        process=process,
        view=view,
        windows=folded.windows + len(windows),
        wall_totals=tuple(wall_totals),
        cpu_totals=tuple(cpu_totals),
        wall_measured=wall_measured,
        shape=shape,
        pauses=session_pauses(session, t, duration, process),
        pause_history=_pause_history(session, t, shown[-history:], process),
        tails=session_tails(session, t, tails) if tails is not None else (),
        recent_requests=summarize_requests(recent_spans, recent_s, session.thread_pid),
        generation=_generation(session, t, kept, allocator, process),
        batches=calls_by_batch(kept),
        requests=summarize_requests(kept, duration, session.thread_pid) if tails is not None else None,
        engine=engine_summary(session, kept, duration, t, labels) if engine_of(labels, process) else None,
    )
