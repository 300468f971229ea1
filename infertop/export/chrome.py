"""``infertop export FILE --format chrome``: a recording as one Chrome trace (Trace Event Format).

Streamed: the recording is read twice, record by record (first for the time origin and stage
rules, then for the events), and events are written as they come, so memory does not grow with
the length of the recording. What each track means: docs/export.md.

Tracks, in the target's process (pid = the target's pid):
  - each Python thread (its OS tid): its sampled stacks as nested slices (``samples.py``);
  - ``stage · THREAD``: the stage of each moment of that thread;
  - ``stage calls · THREAD``: timed stage calls (``infertop.stage``, agent-timed functions);
  - ``annotations · THREAD``: ``record_function`` ranges (``ProfilerStep#N`` ...);
  - ``torch ops (per-window aggregate)``: each profiler window's op call tree (``oplayout.py``).
In a second process, ``GPU``: kernels and memcpy/memset per window, with arrows from the ops that
launched them, and the NVML and CUDA-allocator readings as counters. Collector health, markers
and findings (per minute) are instant events.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from infertop import __version__
from infertop.analysis.stages import StageClassifier
from infertop.config import Config
from infertop.export import chrome_counters as counters
from infertop.export.chunk_findings import FindingsByChunk
from infertop.export.jsonout import TraceEventWriter, us
from infertop.export.lanes import EndOrderedLanes, StartOrderedLanes
from infertop.export.oplayout import OpLayout
from infertop.export.prelude import ExportResult, scan_recording
from infertop.export.samples import SampleTimeline
from infertop.model.events import (
    AllocatorReading,
    CollectorStatus,
    FrameDef,
    Marker,
    OpWindow,
    SampleWindow,
    StackDef,
    StageSpan,
    TargetExited,
    TargetInfo,
    ThreadDef,
)
from infertop.model.gpu import GpuReading
from infertop.record.stream import RecordingStream

# synthetic thread ids (Linux tids are below 2**22; trace viewers keep tids as 32-bit)
STAGE, CALLS, ANNOT = 0x10000000, 0x20000000, 0x30000000
LANE_SHIFT = 22
OPS_TRACK = 0x3F000000
KERNELS, COPIES = 1, 2
GPU_PID_OFFSET = 0x40000000


class _Tracks:
    """Names, order and lanes of the tracks, with their metadata written on first use."""

    def __init__(self, emit: Callable[[dict], None], pid: int) -> None:
        self.emit, self.pid = emit, pid
        self.names: dict[int, str] = {}
        self.rank: dict[int, int] = {}
        self.named: set[int] = set()
        self.span_lanes: dict[int, EndOrderedLanes] = {}
        self.annot_lanes: dict[int, StartOrderedLanes] = {}

    def thread_name(self, tid: int) -> str:
        return self.names.get(tid) or f"thread {tid}"

    def name_track(self, track: int, name: str, order: int, pid: int | None = None) -> None:
        if track in self.named:
            return
        self.named.add(track)
        p = self.pid if pid is None else pid
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
        base = self._order(tid)
        self.name_track(tid, self.thread_name(tid), base)
        self.name_track(STAGE | tid, f"stage · {self.thread_name(tid)}", base + 1)
        return tid, STAGE | tid

    def lane(self, kind: int, tid: int, lane: int) -> int:
        track = kind | (lane << LANE_SHIFT) | (tid & ((1 << LANE_SHIFT) - 1))
        label = "stage calls" if kind == CALLS else "annotations"
        extra = f" ({lane + 1})" if lane else ""
        self.name_track(
            track,
            f"{label} · {self.thread_name(tid)}{extra}",
            self._order(tid) + (2 if kind == CALLS else 3),
        )
        return track


def export_chrome_recording(path: str, out: str, config: Config | None = None) -> ExportResult:
    cfg = config or Config()
    stream = RecordingStream(path)
    t0, recorded_rules, target = scan_recording(stream)
    classifier = StageClassifier(tuple(cfg.stage_rules) + tuple(recorded_rules))
    pid = target.pid if target.pid is not None and 0 < target.pid < GPU_PID_OFFSET else 1
    gpu_pid = pid + GPU_PID_OFFSET

    def ns(t: float) -> int:
        return round((t - t0) * 1e9)

    writer = TraceEventWriter(out)
    emit = writer.event
    try:
        _metadata(emit, pid, gpu_pid, target)
        tracks = _Tracks(emit, pid)
        frames: list = []
        stacks: list[tuple[int, ...]] = []
        timeline = SampleTimeline(
            emit,
            pid,
            frames,
            stacks,
            lambda sid: classifier.stage_of(sid, [frames[f] for f in stacks[sid]]),
            ns,
            tracks.thread,
        )
        ops = OpLayout(emit, pid, OPS_TRACK, gpu_pid, KERNELS, COPIES, ns)
        chunks = FindingsByChunk(classifier, cfg.findings)
        gpu_tracks_named = False
        for ev in stream:
            done = chunks.add(ev)
            if done is not None:
                counters.findings(emit, pid, done, ns)
            if isinstance(ev, SampleWindow):
                timeline.window(ev)
                counters.stage_counter(emit, pid, ev, ns, classifier, frames, stacks)
            elif isinstance(ev, FrameDef):
                if ev.frame_id == len(frames):
                    frames.append(ev.frame)
            elif isinstance(ev, StackDef):
                if ev.stack_id == len(stacks):
                    stacks.append(ev.frames)
            elif isinstance(ev, ThreadDef):  # --children: which process, too
                tracks.names[ev.tid] = f"pid {ev.pid} {ev.name}" if ev.pid else ev.name
            elif isinstance(ev, StageSpan):
                _span(emit, tracks, pid, ev, ns)
            elif isinstance(ev, OpWindow):
                if not gpu_tracks_named:
                    gpu_tracks_named = True
                    tracks.name_track(OPS_TRACK, "torch ops (per-window aggregate)", 1 << 20)
                    tracks.name_track(KERNELS, "kernels (per-window aggregate)", 0, gpu_pid)
                    tracks.name_track(COPIES, "memcpy / memset (per-window aggregate)", 1, gpu_pid)
                ops.window(ev)
                _annotations(emit, tracks, pid, ev, ns)
                counters.window_counters(emit, gpu_pid, ev, ns)
            elif isinstance(ev, AllocatorReading):
                counters.allocator(emit, gpu_pid, ev, ns)
            elif isinstance(ev, GpuReading):
                counters.nvml(emit, gpu_pid, ev, ns)
            elif isinstance(ev, CollectorStatus):
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
            elif isinstance(ev, Marker):
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
            elif isinstance(ev, TargetExited):
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
        dropped = sum(l.dropped for l in tracks.span_lanes.values()) + sum(
            l.dropped for l in tracks.annot_lanes.values()
        )
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


def _metadata(emit: Callable[[dict], None], pid: int, gpu_pid: int, target: TargetInfo) -> None:
    cmd = (target.cmdline or "python")[:120]
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
    lanes = tracks.span_lanes.setdefault(ev.tid, EndOrderedLanes())
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
