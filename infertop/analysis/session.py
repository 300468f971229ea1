"""The session timeline: every event in order, with per-window stage counts kept as it grows.

Live collection and replay feed the same ``Session`` (``apply``), so every view works on both.
Interning of raw py-spy windows into frame/stack ids happens here too (``intern``), which is
where definition events for the recording come from.

A live session is bounded (``retain_s``): sample windows, stage spans, op windows and allocator
readings older than the horizon are folded into running summaries (stage and stack counts,
span-duration histograms, merged op totals), so whole-session numbers stay whole while memory
stops growing. The recording on disk keeps everything; replay and report read it into an
unbounded session (``retain_s=None``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

from infertop.analysis.cpu_contention import CpuContention, CpuTotals, contention
from infertop.analysis.generation_split import GenerationSplit
from infertop.analysis.gpu_series import GpuFold
from infertop.analysis.host_memory import thin
from infertop.analysis.latency_sketch import DurationHistogram
from infertop.analysis.ops import OpTotals
from infertop.analysis.pauses import PauseFold
from infertop.analysis.shares import Latency
from infertop.analysis.stages import IDLE, StageClassifier
from infertop.analysis.tail import CallSampleIndex
from infertop.analysis.wall import WallAttribution, by_thread_stages
from infertop.analysis.windows import WindowSummary, WindowTotals, split_by_pid
from infertop.collect.agent.client import RawCallSamples
from infertop.collect.pyspy import RawSampleWindow
from infertop.model.engine import EngineStats, keep
from infertop.model.events import (
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
    ProcessDef,
    SampleWindow,
    StackDef,
    StageSpan,
    TargetExited,
    TargetInfo,
    ThreadDef,
)
from infertop.model.gpu import GpuReading
from infertop.model.host_memory import HostMemoryReading, ObjectCensus
from infertop.model.symbols import SymbolTable

#: generation calls a session keeps (the oldest tenth goes when there are more): a day of a
#: busy generation loop's calls would otherwise grow without end
MAX_GENERATIONS = 50_000
#: an engine's scheduler windows kept (two a second): past it the older half is merged two by
#: two (model/engine.py ``keep``), its totals and distributions exact
MAX_ENGINE_STATS = 20_000
#: the agent's object censuses kept per session (one each 10 s or more): past it, every other
#: one of the older half goes, so the first and the newest stay
MAX_CENSUSES = 2_000


#: distinct collector messages a session keeps (a failing collector repeats itself)
MAX_STATUS_NOTES = 20


def _is_news(ev: CollectorStatus, said_before: bool) -> bool:
    """A collector's message worth keeping for the report: a failure (not NVML's "no GPU",
    which the GPU section says), py-spy's word on its windows after its first (a window that
    failed and why, windows lengthened on a busy host), the agent lowering its duty cycle."""
    if ev.state == "failed" or (ev.state == "unavailable" and ev.collector != "nvml"):
        return True
    if ev.collector == "py-spy":
        return said_before and ev.state == "running"
    # the agent lowering its duty cycle; the functions its wrappers could not reach (Python < 3.12)
    return ev.collector == "agent" and ("instead of" in ev.message or "not reached" in ev.message)

@dataclass
class Session:
    classifier: StageClassifier = field(default_factory=StageClassifier)
    target: TargetInfo = field(default_factory=lambda: TargetInfo(pid=None))
    symbols: SymbolTable = field(default_factory=SymbolTable)
    threads: dict[int, str] = field(default_factory=dict)
    #: with --children: the processes followed, and which process each thread belongs to
    processes: dict[int, ProcessDef] = field(default_factory=dict)
    thread_pid: dict[int, int] = field(default_factory=dict)
    windows: list[WindowSummary] = field(default_factory=list)
    spans: list[StageSpan] = field(default_factory=list)
    statuses: dict[str, CollectorStatus] = field(default_factory=dict)
    #: what the collectors said along the way worth a report's note (``_is_news``), each once,
    #: in order; at most MAX_STATUS_NOTES
    status_notes: dict[str, None] = field(default_factory=dict)
    markers: list[Marker] = field(default_factory=list)
    exited: TargetExited | None = None
    op_windows: list[OpWindow] = field(default_factory=list)  # ordered by t_end
    allocator: list[AllocatorReading] = field(default_factory=list)  # ordered by t
    gpu: list[GpuReading] = field(default_factory=list)  # NVML readings, ordered by t
    #: each process's host memory (/proc and its cgroup), ordered by t; past the horizon
    #: thinned (``analysis/host_memory.thin``: each one's first, its peak, one per 30 s)
    host_memory: list[HostMemoryReading] = field(default_factory=list)
    #: the agents' object censuses (what grows in each heap), in order of arrival
    censuses: list[ObjectCensus] = field(default_factory=list)
    #: the agent's evidence of pauses (GC, event-loop lag) and its call samples (tail view)
    gc_pauses: list[GcPause] = field(default_factory=list)
    loop_lags: list[LoopLag] = field(default_factory=list)
    call_samples: CallSampleIndex = field(default_factory=CallSampleIndex)
    #: the agent's generation calls, in order of end: the newest MAX_GENERATIONS are kept
    generations: list[GenerationCall] = field(default_factory=list)
    #: an LLM engine's scheduler state (vLLM's own metrics), window by window, in order of arrival
    engine_stats: list[EngineStats] = field(default_factory=list)
    pause_fold: PauseFold = field(default_factory=PauseFold)
    #: each process's time on a CPU and waiting for one, window by window (the sampler's
    #: reading of the kernel's schedstat: analysis/cpu_contention.py); ``cpu_folded``: summed
    #: past the horizon
    cpu_waits: list[CpuWait] = field(default_factory=list)
    cpu_folded: CpuTotals = field(default_factory=CpuTotals)
    _gpu_ts: list[float] = field(default_factory=list)
    _host_memory_ts: list[float] = field(default_factory=list)
    _window_ends: list[float] = field(default_factory=list)
    _op_ends: list[float] = field(default_factory=list)
    _alloc_ts: list[float] = field(default_factory=list)
    #: every span's duration (ms) by stage, for the session's latency percentiles without
    #: re-reading every span at each snapshot; sorted when read (timsort: a sorted run + the new)
    _span_ms: dict[str, list[float]] = field(default_factory=dict)
    _span_ms_sorted: bool = True
    _span_last_end: float = float("-inf")
    #: full detail is kept for this many seconds before the newest event; older windows, spans,
    #: op windows and allocator readings are folded (None: keep everything, as replay does)
    retain_s: float | None = None
    folded: WindowTotals = field(default_factory=WindowTotals)
    #: with --children: the folded windows' stage and stack counts of each process
    folded_by_pid: dict[int, WindowTotals] = field(default_factory=dict)
    folded_spans: dict[str, DurationHistogram] = field(default_factory=dict)
    folded_ops: OpTotals = field(default_factory=OpTotals)
    #: the same per process, keyed by the op windows' pid (0: the target); with processes only
    folded_ops_by_pid: dict[int, OpTotals] = field(default_factory=dict)
    op_windows_folded: int = 0
    gpu_fold: GpuFold = field(default_factory=GpuFold)  # NVML readings past the horizon
    _op_t_first: float | None = None
    _wall: WallAttribution = field(default_factory=WallAttribution)
    #: the windows' prefill and decode samples split at the agent's first tokens
    _generation_split: GenerationSplit = field(default_factory=GenerationSplit)
    _newest: float = float("-inf")
    _next_fold: float = float("inf")

    # -- building ---------------------------------------------------------------------------
    def intern(self, raw: object) -> list[Event]:
        """Turn a collector's raw window into definition events plus a ``SampleWindow`` (the
        agent's raw call samples: plus ``CallSamples``)."""
        if isinstance(raw, RawCallSamples):
            return self._intern_call_samples(raw)
        if not isinstance(raw, RawSampleWindow):
            return [raw]  # type: ignore[list-item]
        new: list[Event] = []
        counts: dict[tuple[int, int], int] = {}
        for pid, ppid, cmdline in raw.processes:
            known = self.processes.get(pid)
            if known is None or known.ppid != ppid or known.cmdline != cmdline:
                self.processes[pid] = ProcessDef(pid, ppid, cmdline)
                new.append(self.processes[pid])
        pids = dict(raw.thread_pids)
        for tid, name, frames, n in raw.counts:
            pid = pids.get(tid, 0)
            if (
                tid not in self.threads
                or (name and self.threads[tid] != name)
                or (pid and self.thread_pid.get(tid) != pid)
            ):
                new.append(ThreadDef(tid, name, pid))
                self.threads[tid] = name
                if pid:
                    self.thread_pid[tid] = pid
            fids = tuple(self.symbols.frame_id(f, new) for f in frames)
            sid = self.symbols.stack_id(fids, new)
            counts[(tid, sid)] = counts.get((tid, sid), 0) + n
        new.append(
            SampleWindow(
                raw.t_start,
                raw.t_end,
                raw.rate_hz,
                raw.ticks,
                tuple((t, s, n) for (t, s), n in counts.items()),
                raw.errors,
                raw.lag_s,
                raw.threads,
                raw.idle,
            )
        )
        return new

    def _intern_call_samples(self, raw: RawCallSamples) -> list[Event]:
        new: list[Event] = []
        rows = []
        for tid, t, frames in raw.samples:
            fids = tuple(self.symbols.frame_id(f, new) for f in frames)
            rows.append((tid, t, self.symbols.stack_id(fids, new)))
        new.append(CallSamples(raw.rate_hz, tuple(rows), raw.gil_waits, raw.pid))
        return new

    def apply(self, ev: Event) -> None:
        """Add one event to the timeline. Definitions made by ``intern`` are already known."""
        match ev:
            case SampleWindow():
                self._add_window(ev)
                self._saw(ev.t_end)
            case FrameDef() | StackDef():
                self.symbols.learn(ev)
            case ThreadDef():
                self.threads[ev.tid] = ev.name
                if ev.pid:
                    self.thread_pid[ev.tid] = ev.pid
            case ProcessDef():
                self.processes[ev.pid] = ev
            case CollectorStatus():
                if _is_news(ev, ev.collector in self.statuses) and len(self.status_notes) < MAX_STATUS_NOTES:
                    self.status_notes[f"{ev.collector}: {ev.message}"] = None
                self.statuses[ev.collector] = ev
            case StageSpan():
                self.spans.append(ev)
                self._span_ms.setdefault(ev.stage, []).append((ev.t_end - ev.t_start) * 1000.0)
                self._span_ms_sorted = False
                self._span_last_end = max(self._span_last_end, ev.t_end)
                self._saw(ev.t_end)
            case OpWindow():
                i = bisect.bisect_right(self._op_ends, ev.t_end)
                self._op_ends.insert(i, ev.t_end)
                self.op_windows.insert(i, ev)
                self._saw(ev.t_end)
            case AllocatorReading():
                i = bisect.bisect_right(self._alloc_ts, ev.t)
                self._alloc_ts.insert(i, ev.t)
                self.allocator.insert(i, ev)
                self._saw(ev.t)
            case GpuReading():
                i = bisect.bisect_right(self._gpu_ts, ev.t)
                self._gpu_ts.insert(i, ev.t)
                self.gpu.insert(i, ev)
                self._saw(ev.t)
            case HostMemoryReading():
                i = bisect.bisect_right(self._host_memory_ts, ev.t)
                self._host_memory_ts.insert(i, ev.t)
                self.host_memory.insert(i, ev)
                self._saw(ev.t)
            case ObjectCensus():
                self.censuses.append(ev)
                if len(self.censuses) > MAX_CENSUSES:
                    half = MAX_CENSUSES // 2
                    self.censuses[:half] = self.censuses[:half:2]
            case CpuWait():
                self.cpu_waits.append(ev)
                self._saw(ev.t_end)
            case EngineStats():
                keep(self.engine_stats, ev, MAX_ENGINE_STATS)
                self._saw(ev.t_end)
            case GcPause():
                self.gc_pauses.append(ev)
                self._saw(ev.t_end)
            case LoopLag():
                self.loop_lags.append(ev)
                self._saw(ev.t)
            case GenerationCall():
                if self.generations and ev.t_end < self.generations[-1].t_end:
                    bisect.insort(self.generations, ev, key=lambda g: g.t_end)
                else:
                    self.generations.append(ev)
                self._generation_split.call(ev)
                if len(self.generations) > MAX_GENERATIONS:
                    del self.generations[: len(self.generations) - MAX_GENERATIONS * 9 // 10]
                self._saw(ev.t_end)
            case CallSamples():
                self.call_samples.add(ev)
                if ev.samples:
                    self._saw(ev.samples[-1][1])
            case TargetInfo():
                self.target = self._merge_target(ev)
            case TargetExited():
                self.exited = ev
            case Marker():
                self.markers.append(ev)

    # -- bounding ---------------------------------------------------------------------------
    def _saw(self, t: float) -> None:
        """Note the newest time seen; fold what fell past the horizon, a tenth of it at a time
        (so folding is an occasional batch, not work on every event)."""
        if self.retain_s is None or t <= self._newest:
            return
        self._newest = t
        if self._next_fold == float("inf"):
            self._next_fold = t + self.retain_s * 1.1
        elif t >= self._next_fold:
            self.fold(t - self.retain_s)
            self._next_fold = t + self.retain_s * 0.1

    def fold(self, before: float) -> None:
        """Fold windows, spans and op windows that ended before ``before`` into the session's
        summaries, and drop allocator readings older than the newest one before it."""
        # sample windows (ordered by end)
        n = bisect.bisect_left(self._window_ends, before)
        self._generation_split.forget(before)
        if n:
            owner, target = self.thread_pid, self.target.pid or 0
            for ws in self.windows[:n]:
                self.folded.add(ws)
                if self.processes:
                    self._fold_by_pid(ws, owner, target)
            del self.windows[:n]
            del self._window_ends[:n]
        # stage spans (nearly ordered: batches from several threads)
        old = [sp for sp in self.spans if sp.t_end < before]
        if old:
            self.spans = [sp for sp in self.spans if sp.t_end >= before]
            by_stage: dict[str, list[float]] = {}
            for sp in old:
                by_stage.setdefault(sp.stage, []).append((sp.t_end - sp.t_start) * 1000.0)
            for stage, ms in by_stage.items():
                self.folded_spans.setdefault(stage, DurationHistogram()).add_many(ms)
            self._span_ms = {}
            for sp in self.spans:
                self._span_ms.setdefault(sp.stage, []).append((sp.t_end - sp.t_start) * 1000.0)
            self._span_ms_sorted = False
        # pauses: summed; call samples: dropped (the tail view is of the calls kept)
        old_gc = [p for p in self.gc_pauses if p.t_end < before]
        if old_gc:
            self.pause_fold.add_gc(old_gc)
            self.gc_pauses = [p for p in self.gc_pauses if p.t_end >= before]
        old_lags = [x for x in self.loop_lags if x.t < before]
        if old_lags:
            self.pause_fold.add_lags(old_lags)
            self.loop_lags = [x for x in self.loop_lags if x.t >= before]
        self.call_samples.drop_before(before)
        # op windows (ordered by end)
        n = bisect.bisect_left(self._op_ends, before)
        if n:
            if self._op_t_first is None:
                self._op_t_first = self.op_windows[0].t_start
            for w in self.op_windows[:n]:
                self.folded_ops.add(w)
                if self.processes:  # each process's own too, for its view (key w)
                    self.folded_ops_by_pid.setdefault(w.pid, OpTotals()).add(w)
            self.op_windows_folded += n
            del self.op_windows[:n]
            del self._op_ends[:n]
        # allocator readings: only each process's newest before the horizon still answers
        n = bisect.bisect_left(self._alloc_ts, before)
        if n > 1:
            newest = {a.pid: i for i, a in enumerate(self.allocator[:n])}
            keep = sorted(newest.values()) + list(range(n, len(self.allocator)))
            self.allocator = [self.allocator[i] for i in keep]
            self._alloc_ts = [self._alloc_ts[i] for i in keep]
        # NVML readings: summed (the newest before the horizon stays, as the panel's "now")
        n = bisect.bisect_left(self._gpu_ts, before) - 1
        if n > 0:
            self.gpu_fold.add(self.gpu[:n], self._working())
            del self.gpu[:n]
            del self._gpu_ts[:n]
        # CPU waits: summed by process
        old_cpu = [w for w in self.cpu_waits if w.t_end < before]
        if old_cpu:
            self.cpu_folded.add(old_cpu)
            self.cpu_waits = [w for w in self.cpu_waits if w.t_end >= before]
        # host memory: thinned, so that a day's first, peak and slope stay (a few a minute)
        n = bisect.bisect_left(self._host_memory_ts, before)
        if n:
            kept = thin(self.host_memory[:n])
            if len(kept) < n:
                self.host_memory[:n] = kept
                self._host_memory_ts[:n] = [r.t for r in kept]

    def _working(self) -> list[tuple[float, float]] | None:
        """When the target worked, as far as the windows (folded and kept) say; None: no
        windows at all (then every NVML reading counts as taken while it worked)."""
        if not self.folded.windows and not self.windows:
            return None
        quiet = (IDLE, "queue")
        return self.folded.working + [
            (w.window.t_start, w.window.t_end)
            for w in self.windows
            if any(n for s, n in w.stage_counts.items() if s not in quiet)
        ]

    def _fold_by_pid(self, ws: WindowSummary, owner: dict[int, int], target: int) -> None:
        """The window as each process's view (``ProcessFilter``) sees it, folded per process."""
        for pid, mine in split_by_pid(ws, owner, target, self.processes).items():
            self.folded_by_pid.setdefault(pid, WindowTotals()).add(mine)

    @property
    def windows_folded(self) -> int:
        return self.folded.windows

    @property
    def window_count(self) -> int:
        """Sample windows in the whole session, folded ones included."""
        return self.folded.windows + len(self.windows)

    @property
    def samples(self) -> int:
        """Active samples of the CPU windows in the whole session, folded windows included."""
        return self.folded.active + sum(w.active for w in self.windows if not w.wall)

    def _merge_target(self, ev: TargetInfo) -> TargetInfo:
        """A later TargetInfo for the same pid fills in what was unknown (the agent's torch
        version, say); its None fields and a zero start keep what is known."""
        old = self.target
        if old.pid is not None and ev.pid is not None and ev.pid != old.pid:
            return ev
        return replace(
            old,
            pid=ev.pid if ev.pid is not None else old.pid,
            cmdline=ev.cmdline or old.cmdline,
            python=ev.python or old.python,
            torch=ev.torch or old.torch,
            started=ev.started or old.started,
        )

    def stage_of(self, stack_id: int) -> str:
        return self.classifier.stage_of(stack_id, self.symbols.stack_frames(stack_id))

    def _add_window(self, w: SampleWindow) -> None:
        by_thread = by_thread_stages(w.counts, self.stage_of)
        stage_counts: dict[str, int] = {}
        if w.idle:  # a wall window: the wall view's counts (analysis/wall.py)
            by_thread = self._wall.wall_window(by_thread, w.ticks)
            for per in by_thread.values():
                for stage, n in per.items():
                    stage_counts[stage] = stage_counts.get(stage, 0) + n
            idle = stage_counts.setdefault(IDLE, 0)
            summary = WindowSummary(
                w, stage_counts, sum(stage_counts.values()) - idle, idle, True, by_thread,
                stage_counts, by_thread,
            )  # fmt: skip
        else:
            wall_by_thread = self._wall.cpu_window(by_thread, w.ticks, self.threads)
            wall_counts = None
            if wall_by_thread is not None:
                wall_counts = {IDLE: 0}
                for per in wall_by_thread.values():
                    for stage, n in per.items():
                        wall_counts[stage] = wall_counts.get(stage, 0) + n
            for per in by_thread.values():
                per.pop(IDLE, None)  # a sampled thread caught in a blocking wait is idle
                for stage, n in per.items():
                    stage_counts[stage] = stage_counts.get(stage, 0) + n
            active = sum(stage_counts.values())
            threads = w.threads or len(self.threads) or 1
            idle = max(0, w.ticks * threads - active)
            stage_counts[IDLE] = idle
            summary = WindowSummary(
                w, stage_counts, active, idle, False, by_thread, wall_counts, wall_by_thread or {}
            )
        self._generation_split.window(summary)
        self.windows.append(summary)
        self._window_ends.append(w.t_end)

    # -- reading ----------------------------------------------------------------------------
    @property
    def t_first(self) -> float:
        firsts = [self.windows[0].window.t_start] if self.windows else []
        if self.folded.t_first is not None:
            firsts = [self.folded.t_first]
        if self._op_t_first is not None:
            firsts.append(self._op_t_first)
        elif self.op_windows:
            firsts.append(self.op_windows[0].t_start)
        return min(firsts) if firsts else self.target.started

    @property
    def t_last(self) -> float:
        lasts = [self.windows[-1].window.t_end] if self.windows else []
        if self.op_windows:
            lasts.append(self.op_windows[-1].t_end)
        return max(lasts) if lasts else self.target.started

    def windows_between(self, t0: float | None, t1: float | None) -> list[WindowSummary]:
        """Windows that end in (t0, t1]; None means open-ended."""
        lo = 0 if t0 is None else bisect.bisect_right(self._window_ends, t0)
        hi = len(self.windows) if t1 is None else bisect.bisect_right(self._window_ends, t1)
        return self.windows[lo:hi]

    def op_windows_between(self, t0: float | None, t1: float | None) -> list[OpWindow]:
        """Op windows that end in (t0, t1]; None means open-ended."""
        lo = 0 if t0 is None else bisect.bisect_right(self._op_ends, t0)
        hi = len(self.op_windows) if t1 is None else bisect.bisect_right(self._op_ends, t1)
        return self.op_windows[lo:hi]

    def allocator_at(self, t: float | None) -> AllocatorReading | None:
        """The newest allocator reading taken at or before ``t`` (None: the newest of all)."""
        if not self.allocator:
            return None
        if t is None:
            return self.allocator[-1]
        i = bisect.bisect_right(self._alloc_ts, t)
        return self.allocator[i - 1] if i else None

    def gpu_upto(self, t: float | None) -> list[GpuReading]:
        """NVML readings taken at or before ``t`` (None: all of them), oldest first."""
        return self.gpu if t is None else self.gpu[: bisect.bisect_right(self._gpu_ts, t)]

    def cpu_contention(self, t: float | None = None, pid: int | None = None) -> CpuContention | None:
        """Each process's CPU waits up to ``t`` (None: all), only ``pid``'s where given; None
        where nothing was read."""
        return contention(self.cpu_waits, self.cpu_folded, None, t, pid)

    def host_memory_upto(self, t: float | None) -> list[HostMemoryReading]:
        """Host memory readings taken at or before ``t`` (None: all of them), oldest first."""
        if t is None:
            return self.host_memory
        return self.host_memory[: bisect.bisect_right(self._host_memory_ts, t)]

    def span_durations(self, t: float | None) -> dict[str, list[float]] | None:
        """Durations (ms) of the spans ending by ``t``, by stage, each list sorted — when that is
        every span kept (live, and replay at its playhead); None otherwise (use
        ``spans_between``). Folded spans are not in them (``span_latencies`` counts those too).
        The lists are the session's own: read them, do not change them."""
        if t is not None and self._span_last_end > t:
            return None
        if not self._span_ms_sorted:
            for durations in self._span_ms.values():
                durations.sort()
            self._span_ms_sorted = True
        return self._span_ms

    def span_latencies(self, t: float | None) -> dict[str, tuple[int, Latency]] | None:
        """Calls and p50/p95/p99 (ms) by stage over every span ending by ``t`` — folded spans
        included — when that is every span (live, and replay at its playhead); None otherwise
        (use ``spans_between``). Exact while nothing is folded; within 0.5 % after."""
        exact = self.span_durations(t)
        if exact is None:
            return None
        out: dict[str, tuple[int, Latency]] = {}
        for stage in set(exact) | set(self.folded_spans):
            hist = self.folded_spans.get(stage) or DurationHistogram()
            got = hist.latency(exact.get(stage, ()))
            if got is not None:
                out[stage] = got
        return out

    def generations_upto(self, t: float | None) -> list[GenerationCall]:
        """The generation calls kept that ended by ``t`` (None: all)."""
        if t is None:
            return list(self.generations)
        n = bisect.bisect_right(self.generations, t, key=lambda g: g.t_end)
        return self.generations[:n]

    def spans_between(self, t0: float | None, t1: float | None) -> list[StageSpan]:
        return [
            s
            for s in self.spans
            if (t0 is None or s.t_end > t0) and (t1 is None or s.t_end <= t1)
        ]
