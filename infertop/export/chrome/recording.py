"""``infertop export FILE --format chrome``: a recording as one Chrome trace (Trace Event Format).

Streamed: the recording is read twice, record by record (first for the time origin and stage
rules, then for the events), and events are written as they come, so memory does not grow with
the length of the recording. What each track means: docs/export.md.

Tracks, in each process's own track group (Chrome pid = the process's pid; a recording of one
process has one, ``--children``, imported rank directories and merged recordings one per
process, named by ``process_name`` metadata):
  - each Python thread (its OS tid): its sampled stacks as nested slices (``samples.py``);
  - ``stage · THREAD``: the stage of each moment of that thread;
  - ``stage calls · THREAD``: timed stage calls (``infertop.stage``, agent-timed functions);
  - ``annotations · THREAD``: ``record_function`` ranges (``ProfilerStep#N`` ...);
  - ``GC · THREAD``: the garbage collections on that thread (``pauses.py``);
  - ``torch ops (per-window aggregate)``: each profiler window's op call tree (``oplayout.py``).
In a second group per process with op windows, ``GPU`` (``GPU · pid N`` for the others):
kernels and memcpy/memset per window, with arrows from the ops that launched them, and the
CUDA-allocator readings as counters. Each GPU's NVML readings are counters in the GPU group of
the process using it (``gpu_groups.py``; one process: all in ``GPU``). Collector health,
markers and findings (per minute) are instant events; each asyncio event loop's lag is a
counter in its process, and so is each process's host memory (``host_memory.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from infertop import __version__
from infertop.analysis.stages import StageClassifier
from infertop.config import Config
from infertop.export.chrome import counters
from infertop.export.chrome.chunk_findings import FindingsByChunk
from infertop.export.chrome.generation import generation_slices
from infertop.export.chrome.gpu_groups import GpuGroups
from infertop.export.chrome.host_memory import HostMemoryCounters
from infertop.export.chrome.pauses import PauseEvents
from infertop.export.chrome.samples import SampleTimeline
from infertop.export.jsonout import TraceEventWriter, us
from infertop.export.lanes import EndOrderedLanes, StartOrderedLanes
from infertop.export.oplayout import OpLayout
from infertop.export.prelude import ExportResult, scan_recording
from infertop.model.events import (
    AllocatorReading,
    CollectorStatus,
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
from infertop.model.host_memory import HostMemoryReading
from infertop.model.symbols import SymbolTable
from infertop.record.stream import RecordingStream

# synthetic thread ids (Linux tids are below 2**22; trace viewers keep tids as 32-bit)
STAGE, CALLS, ANNOT, GC, GEN = 0x10000000, 0x20000000, 0x30000000, 0x50000000, 0x60000000
#: the lane tracks of a thread: their name and place after the thread's own two tracks
LANE_TRACKS = {
    CALLS: ("stage calls", 2), ANNOT: ("annotations", 3), GC: ("GC", 4), GEN: ("generation", 5),
}  # fmt: skip
LANE_SHIFT = 22
OPS_TRACK = 0x3F000000
KERNELS, COPIES = 1, 2
GPU_PID_OFFSET = 0x40000000


class _Tracks:
    """Names, order and lanes of the tracks, with their metadata written on first use."""

    def __init__(self, emit: Callable[[dict], None], pid: int) -> None:
        self.emit, self.pid = emit, pid
        self.names: dict[int, str] = {}
        self.owner: dict[int, int] = {}  # tid -> the Chrome pid of its process
        self.rank: dict[int, int] = {}
        self.named: set[tuple[int, int]] = set()
        self.span_lanes: dict[int, EndOrderedLanes] = {}
        self.annot_lanes: dict[int, StartOrderedLanes] = {}

    def thread_name(self, tid: int) -> str:
        return self.names.get(tid) or f"thread {tid}"

    def pid_of(self, tid: int) -> int:
        return self.owner.get(tid, self.pid)

    def name_track(self, track: int, name: str, order: int, pid: int | None = None) -> None:
        p = self.pid if pid is None else pid
        if (p, track) in self.named:
            return
        self.named.add((p, track))
        self.emit(
            {"ph": "M", "pid": p, "tid": track, "name": "thread_name", "args": {"name": name}}
        )
        self.emit(
            {
                "ph": "M",
                "pid": p,
                "tid": track,
                "name": "thread_sort_index",
                "args": {"sort_index": order},
            }
        )

    def _order(self, tid: int) -> int:
        if tid not in self.rank:
            self.rank[tid] = len(self.rank)
        return self.rank[tid] * 8

    def thread(self, tid: int) -> tuple[int, int]:
        base, p = self._order(tid), self.pid_of(tid)
        self.name_track(tid, self.thread_name(tid), base, p)
        self.name_track(STAGE | tid, f"stage · {self.thread_name(tid)}", base + 1, p)
        return tid, STAGE | tid

    def lane(self, kind: int, tid: int, lane: int) -> int:
        track = kind | (lane << LANE_SHIFT) | (tid & ((1 << LANE_SHIFT) - 1))
        label, place = LANE_TRACKS[kind]
        extra = f" ({lane + 1})" if lane else ""
        self.name_track(
            track,
            f"{label} · {self.thread_name(tid)}{extra}",
            self._order(tid) + place,
            self.pid_of(tid),
        )
        return track


def export_chrome_recording(path: str, out: str, config: Config | None = None) -> ExportResult:
    cfg = config or Config()
    stream = RecordingStream(path)
    defined: dict[int, ProcessDef] = {}
    gpus = GpuGroups()
    threads: dict[int, ThreadDef] = {}  # each thread's first definition

    def observe(ev: Event) -> None:
        gpus.observe(ev)
        if isinstance(ev, ThreadDef):
            threads.setdefault(ev.tid, ev)

    t0, recorded_rules, target = scan_recording(stream, defined, observe)
    classifier = StageClassifier(tuple(cfg.stage_rules) + tuple(recorded_rules))
    pid = target.pid if target.pid is not None and 0 < target.pid < GPU_PID_OFFSET else 1
    gpu_pid = pid + GPU_PID_OFFSET
    owners = gpus.owners(target.pid)

    def ns(t: float) -> int:
        return round((t - t0) * 1e9)

    writer = TraceEventWriter(out)
    emit = writer.event
    try:
        own = defined.get(target.pid) if target.pid is not None else None
        _metadata(emit, pid, gpu_pid, target, own.cmdline if own is not None else None)
        tracks = _Tracks(emit, pid)
        procs = _Processes(emit, pid, ns)
        for thread in threads.values():  # known from the first pass: events before a thread's
            _define_thread(tracks, procs, thread)  # definition go to its tracks, named after it
        symbols = SymbolTable()
        frames, stacks = symbols.frames, symbols.stacks
        timeline = SampleTimeline(
            emit,
            pid,
            frames,
            stacks,
            lambda sid: classifier.stage_of(sid, [frames[f] for f in stacks[sid]]),
            ns,
            tracks.thread,
            tracks.pid_of,
        )

        def thread_pid(tid: int, own: int) -> int:  # a pause's process: its thread's, else its own
            return tracks.pid_of(tid) if tid in tracks.owner or not own else procs.chrome_pid(own)

        pauses = PauseEvents(
            emit, ns, lambda tid, lane: tracks.lane(GC, tid, lane), thread_pid, tracks.thread_name
        )

        def gpu_of(index: int) -> int:  # the GPU group a device's NVML counters go in
            return procs.gpu_group(procs.chrome_pid(owners.get(index, pid)))

        chunks = FindingsByChunk(classifier, cfg.findings)
        host_memory = HostMemoryCounters(emit, ns)
        for ev in stream:
            done = chunks.add(ev)
            if done is not None:
                counters.findings(emit, pid, done, ns)
            match ev:
                case SampleWindow():
                    if not ev.idle:  # a wall window's idle stacks are not samples of work
                        timeline.window(ev)
                        counters.stage_counter(emit, pid, ev, ns, classifier, frames, stacks)
                case FrameDef() | StackDef():
                    symbols.learn(ev)
                case ThreadDef():  # --children: which process, too
                    _define_thread(tracks, procs, ev)
                case ProcessDef():
                    procs.define(ev)
                case StageSpan():
                    _span(emit, tracks, tracks.pid_of(ev.tid), ev, ns)
                case GenerationCall():
                    generation_slices(emit, tracks.pid_of(ev.tid), tracks.lane(GEN, ev.tid, 0), ev, ns)
                case GcPause():
                    pauses.gc(ev)
                case LoopLag():
                    pauses.lag(ev)
                case OpWindow():
                    p = procs.chrome_pid(ev.pid)
                    procs.ops(p, tracks).window(ev)
                    _annotations(emit, tracks, p, ev, ns)
                    counters.window_counters(emit, p + GPU_PID_OFFSET, ev, ns)
                case AllocatorReading():
                    counters.allocator(emit, procs.chrome_pid(ev.pid) + GPU_PID_OFFSET, ev, ns)
                case GpuReading():
                    counters.nvml(emit, gpu_of, ev, ns)
                case HostMemoryReading():
                    host_memory.reading(procs.chrome_pid(ev.pid), ev)
                case CollectorStatus():
                    emit(
                        {
                            "ph": "i",
                            "s": "p",
                            "pid": pid,
                            "tid": 0,
                            "ts": us(max(0, ns(ev.t))),
                            "name": f"{ev.collector}: {ev.state}",
                            "cat": "collector",
                            "args": {"message": ev.message},
                        }
                    )
                case Marker():
                    emit(
                        {
                            "ph": "i",
                            "s": "g",
                            "pid": pid,
                            "tid": 0,
                            "ts": us(max(0, ns(ev.t))),
                            "name": ev.text,
                            "cat": "marker",
                            "args": dict(ev.extra),
                        }
                    )
                case TargetExited():
                    emit(
                        {
                            "ph": "i",
                            "s": "g",
                            "pid": pid,
                            "tid": 0,
                            "ts": us(max(0, ns(ev.t))),
                            "name": "target exited",
                            "cat": "marker",
                            "args": {"reason": ev.reason},
                        }
                    )
        timeline.finish()
        done = chunks.flush()
        if done is not None:
            counters.findings(emit, pid, done, ns)
        dropped = sum(lane.dropped for lane in tracks.span_lanes.values()) + sum(
            lane.dropped for lane in tracks.annot_lanes.values()
        ) + pauses.dropped
        other: dict[str, Any] = {
            "exporter": f"infertop {__version__}",
            "source": os.path.abspath(path),
            "kind": "recording",
            "t0_unix_s": t0,
            "timeline": "ts are microseconds since t0_unix_s; python stacks within each sample "
            "window are laid out by stage and call path, not in sampled order (docs/export.md)",
        }
        if dropped:
            other["dropped_overlapping_ranges"] = dropped
        if stream.warning:
            other["warning"] = stream.warning
        writer.finish(other)
    except BaseException:
        writer.abort()
        raise
    return ExportResult(out, writer.count, stream.warning)


class _Processes:
    """The Chrome process (track group) of each recorded process, named as it is defined, and
    each one's GPU group (made when its first op window or GPU comes) and op layout."""

    def __init__(self, emit: Callable[[dict], None], main: int, ns: Callable[[float], int]) -> None:
        self.emit, self.main, self.ns = emit, main, ns
        self.order: dict[int, int] = {main: 0}  # Chrome pid -> its place (its GPU group's next)
        self.gpus: set[int] = {main + GPU_PID_OFFSET}  # GPU groups named (the target's is)
        self.layouts: dict[int, OpLayout] = {}

    def chrome_pid(self, pid: int) -> int:
        """0 (the target) and ids a viewer cannot take go in the target's group."""
        return pid if 0 < pid < GPU_PID_OFFSET else self.main

    def _name(self, pid: int, name: str, order: int) -> None:
        self.emit({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}})
        self.emit(
            {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": order}}
        )

    def _process(self, pid: int, name: str) -> None:
        if pid not in self.order:  # the target is named from its TargetInfo
            self.order[pid] = 2 * len(self.order)
            self._name(pid, name, self.order[pid])

    def define(self, p: ProcessDef) -> None:
        self._process(self.chrome_pid(p.pid), f"{(p.cmdline or 'process')[:120]} (pid {p.pid})")

    def gpu_group(self, pid: int) -> int:
        """The GPU group of the process with Chrome pid ``pid``, named the first time."""
        gpu = pid + GPU_PID_OFFSET
        if gpu not in self.gpus:
            self.gpus.add(gpu)
            self._process(pid, f"pid {pid}")
            self._name(gpu, f"GPU · pid {pid}", self.order[pid] + 1)
        return gpu

    def ops(self, pid: int, tracks: _Tracks) -> OpLayout:
        layout = self.layouts.get(pid)
        if layout is None:
            gpu = self.gpu_group(pid)
            tracks.name_track(OPS_TRACK, "torch ops (per-window aggregate)", 1 << 20, pid)
            tracks.name_track(KERNELS, "kernels (per-window aggregate)", 0, gpu)
            tracks.name_track(COPIES, "memcpy / memset (per-window aggregate)", 1, gpu)
            layout = self.layouts[pid] = OpLayout(
                self.emit, pid, OPS_TRACK, gpu, KERNELS, COPIES, self.ns
            )
        return layout


def _define_thread(tracks: _Tracks, procs: _Processes, ev: ThreadDef) -> None:
    """A thread's name (with --children, its process's pid first) and Chrome process."""
    tracks.names[ev.tid] = f"pid {ev.pid} {ev.name}" if ev.pid else ev.name
    if ev.pid:
        tracks.owner[ev.tid] = procs.chrome_pid(ev.pid)


def _metadata(
    emit: Callable[[dict], None], pid: int, gpu_pid: int, target: TargetInfo, own: str | None
) -> None:
    """The target's group and the NVML group. ``own``: the target's process definition's
    command line: in a rank directory or a merged recording the target is one process of many
    (``rank 0 (FILE)``, a host's service) and its group is named as the others are, not after
    the whole recording (``3 ranks of DIR``), which becomes the group's label."""
    cmd = (own or target.cmdline or "python")[:120]
    emit(
        {
            "ph": "M",
            "pid": pid,
            "tid": 0,
            "name": "process_name",
            "args": {"name": f"{cmd} (pid {target.pid})"},
        }
    )
    emit({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": 0}})
    labels = ", ".join(
        x
        for x in (
            f"in {target.cmdline[:160]}" if own and target.cmdline and own != target.cmdline else "",
            f"python {target.python}" if target.python else "",
            f"torch {target.torch}" if target.torch else "",
        )
        if x
    )
    if labels:
        emit(
            {"ph": "M", "pid": pid, "tid": 0, "name": "process_labels", "args": {"labels": labels}}
        )
    emit({"ph": "M", "pid": gpu_pid, "tid": 0, "name": "process_name", "args": {"name": "GPU"}})
    emit(
        {
            "ph": "M",
            "pid": gpu_pid,
            "tid": 0,
            "name": "process_sort_index",
            "args": {"sort_index": 1},
        }
    )


def _span(
    emit: Callable[[dict], None],
    tracks: _Tracks,
    pid: int,
    ev: StageSpan,
    ns: Callable[[float], int],
) -> None:
    s, e = ns(ev.t_start), ns(ev.t_end)
    if e < s:
        return
    lanes = tracks.span_lanes.setdefault(ev.tid, EndOrderedLanes())  # tids: unique across pids
    lane = lanes.place(s, e)
    if lane is None:
        return
    emit(
        {
            "ph": "X",
            "pid": pid,
            "tid": tracks.lane(CALLS, ev.tid, lane),
            "ts": us(s),
            "dur": us(e - s),
            "name": ev.stage,
            "cat": "stage call",
        }
    )


def _annotations(
    emit: Callable[[dict], None], tracks: _Tracks, pid: int, w: OpWindow, ns: Callable[[float], int]
) -> None:
    rows = sorted((ns(a.t_start), -ns(a.t_end), a.tid, a.name) for a in w.annotations)
    for s, neg_e, tid, name in rows:
        e = -neg_e
        if e < s:
            continue
        lane = tracks.annot_lanes.setdefault(tid, StartOrderedLanes()).place(s, e)
        if lane is not None:
            emit(
                {
                    "ph": "X",
                    "pid": pid,
                    "tid": tracks.lane(ANNOT, tid, lane),
                    "ts": us(s),
                    "dur": us(e - s),
                    "name": name,
                    "cat": "annotation",
                }
            )
