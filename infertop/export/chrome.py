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
from infertop.export.chunk_findings import ChunkFindings, FindingsByChunk
from infertop.export.jsonout import TraceEventWriter, us
from infertop.export.lanes import EndOrderedLanes, StartOrderedLanes
from infertop.export.oplayout import OpLayout
from infertop.export.samples import SampleTimeline
from infertop.model.events import (
    AllocatorReading,
    CollectorStatus,
    FrameDef,
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
from infertop.record.stream import RecordingStream
from infertop.sources import event_time

# synthetic thread ids (Linux tids are below 2**22; trace viewers keep tids as 32-bit)
STAGE, CALLS, ANNOT = 0x10000000, 0x20000000, 0x30000000
LANE_SHIFT = 22
OPS_TRACK = 0x3F000000
KERNELS, COPIES = 1, 2
GPU_PID_OFFSET = 0x40000000
MIB = 1 << 20




class ExportResult:
    def __init__(self, output: str, events: int, warning: str | None = None) -> None:
        self.output, self.events, self.warning = output, events, warning


def _scan(stream: RecordingStream) -> tuple[float, tuple[tuple[str, str], ...], TargetInfo]:
    """First pass: the earliest time (the trace's zero), the recorded stage rules, the target."""
    t0: float | None = None
    rules: tuple[tuple[str, str], ...] = ()
    target = TargetInfo(pid=None)
    for ev in stream:
        t = event_time(ev)
        if isinstance(ev, (SampleWindow, StageSpan, OpWindow)):
            t = ev.t_start
        if t is not None and t > 0 and (t0 is None or t < t0):
            t0 = t
        if isinstance(ev, StageRules) and not rules:
            rules = ev.rules
        elif isinstance(ev, TargetInfo):
            target = TargetInfo(
                ev.pid if ev.pid is not None else target.pid, ev.cmdline or target.cmdline,
                ev.python or target.python, ev.torch or target.torch, ev.started or target.started,
            )  # fmt: skip
    return (t0 if t0 is not None else target.started or 0.0), rules, target


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

    def _name(self, track: int, name: str, order: int, pid: int | None = None) -> None:
        if track in self.named:
            return
        self.named.add(track)
        p = self.pid if pid is None else pid
        self.emit({"ph": "M", "pid": p, "tid": track, "name": "thread_name", "args": {"name": name}})
        self.emit({"ph": "M", "pid": p, "tid": track, "name": "thread_sort_index", "args": {"sort_index": order}})

    def _order(self, tid: int) -> int:
        if tid not in self.rank:
            self.rank[tid] = len(self.rank)
        return self.rank[tid] * 8

    def thread(self, tid: int) -> tuple[int, int]:
        base = self._order(tid)
        self._name(tid, self.thread_name(tid), base)
        self._name(STAGE | tid, f"stage · {self.thread_name(tid)}", base + 1)
        return tid, STAGE | tid

    def lane(self, kind: int, tid: int, lane: int) -> int:
        track = kind | (lane << LANE_SHIFT) | (tid & ((1 << LANE_SHIFT) - 1))
        label = "stage calls" if kind == CALLS else "annotations"
        extra = f" ({lane + 1})" if lane else ""
        self._name(track, f"{label} · {self.thread_name(tid)}{extra}", self._order(tid) + (2 if kind == CALLS else 3))
        return track


def export_chrome_recording(path: str, out: str, config: Config | None = None) -> ExportResult:
    cfg = config or Config()
    stream = RecordingStream(path)
    t0, recorded_rules, target = _scan(stream)
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
        timeline = SampleTimeline(emit, pid, frames, stacks,
                                  lambda sid: classifier.stage_of(sid, [frames[f] for f in stacks[sid]]),
                                  ns, tracks.thread)  # fmt: skip
        ops = OpLayout(emit, pid, OPS_TRACK, gpu_pid, KERNELS, COPIES, ns)
        chunks = FindingsByChunk(classifier, cfg.findings)
        gpu_tracks_named = False
        for ev in stream:
            done = chunks.add(ev)
            if done is not None:
                _findings(emit, pid, done, ns)
            if isinstance(ev, SampleWindow):
                timeline.window(ev)
                _stage_counter(emit, pid, ev, ns, classifier, frames, stacks)
            elif isinstance(ev, FrameDef):
                if ev.frame_id == len(frames):
                    frames.append(ev.frame)
            elif isinstance(ev, StackDef):
                if ev.stack_id == len(stacks):
                    stacks.append(ev.frames)
            elif isinstance(ev, ThreadDef):
                tracks.names[ev.tid] = ev.name
            elif isinstance(ev, StageSpan):
                _span(emit, tracks, pid, ev, ns)
            elif isinstance(ev, OpWindow):
                if not gpu_tracks_named:
                    gpu_tracks_named = True
                    tracks._name(OPS_TRACK, "torch ops (per-window aggregate)", 1 << 20)
                    tracks._name(KERNELS, "kernels (per-window aggregate)", 0, gpu_pid)
                    tracks._name(COPIES, "memcpy / memset (per-window aggregate)", 1, gpu_pid)
                ops.window(ev)
                _annotations(emit, tracks, pid, ev, ns)
                _window_counters(emit, gpu_pid, ev, ns)
            elif isinstance(ev, AllocatorReading):
                _allocator(emit, gpu_pid, ev, ns)
            elif isinstance(ev, GpuReading):
                _nvml(emit, gpu_pid, ev, ns)
            elif isinstance(ev, CollectorStatus):
                emit({"ph": "i", "s": "p", "pid": pid, "tid": 0, "ts": us(max(0, ns(ev.t))),
                      "name": f"{ev.collector}: {ev.state}", "cat": "collector",
                      "args": {"message": ev.message}})  # fmt: skip
            elif isinstance(ev, Marker):
                emit({"ph": "i", "s": "g", "pid": pid, "tid": 0, "ts": us(max(0, ns(ev.t))),
                      "name": ev.text, "cat": "marker", "args": dict(ev.extra)})  # fmt: skip
            elif isinstance(ev, TargetExited):
                emit({"ph": "i", "s": "g", "pid": pid, "tid": 0, "ts": us(max(0, ns(ev.t))),
                      "name": "target exited", "cat": "marker", "args": {"reason": ev.reason}})  # fmt: skip
        timeline.finish()
        done = chunks.flush()
        if done is not None:
            _findings(emit, pid, done, ns)
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
    emit({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": f"{cmd} (pid {target.pid})"}})
    emit({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": 0}})
    labels = ", ".join(x for x in (f"python {target.python}" if target.python else "",
                                   f"torch {target.torch}" if target.torch else "") if x)  # fmt: skip
    if labels:
        emit({"ph": "M", "pid": pid, "tid": 0, "name": "process_labels", "args": {"labels": labels}})
    emit({"ph": "M", "pid": gpu_pid, "tid": 0, "name": "process_name", "args": {"name": "GPU"}})
    emit({"ph": "M", "pid": gpu_pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": 1}})


def _span(emit: Callable[[dict], None], tracks: _Tracks, pid: int, ev: StageSpan, ns: Callable[[float], int]) -> None:
    s, e = ns(ev.t_start), ns(ev.t_end)
    if e < s:
        return
    lanes = tracks.span_lanes.setdefault(ev.tid, EndOrderedLanes())
    lane = lanes.place(s, e)
    if lane is None:
        return
    emit({"ph": "X", "pid": pid, "tid": tracks.lane(CALLS, ev.tid, lane), "ts": us(s), "dur": us(e - s),
          "name": ev.stage, "cat": "stage call"})  # fmt: skip


def _annotations(emit: Callable[[dict], None], tracks: _Tracks, pid: int, w: OpWindow, ns: Callable[[float], int]) -> None:
    rows = sorted((ns(a.t_start), -ns(a.t_end), a.tid, a.name) for a in w.annotations)
    for s, neg_e, tid, name in rows:
        e = -neg_e
        if e < s:
            continue
        lane = tracks.annot_lanes.setdefault(tid, StartOrderedLanes()).place(s, e)
        if lane is not None:
            emit({"ph": "X", "pid": pid, "tid": tracks.lane(ANNOT, tid, lane), "ts": us(s), "dur": us(e - s),
                  "name": name, "cat": "annotation"})  # fmt: skip


def _stage_counter(emit: Callable[[dict], None], pid: int, w: SampleWindow, ns: Callable[[float], int],
                   classifier: StageClassifier, frames: list, stacks: list) -> None:  # fmt: skip
    """Threads busy in each stage, on average over the window."""
    if w.ticks <= 0:
        return
    per: dict[str, float] = {}
    for _tid, sid, n in w.counts:
        if 0 <= sid < len(stacks):
            st = classifier.stage_of(sid, [frames[f] for f in stacks[sid]])
            per[st] = per.get(st, 0.0) + n / w.ticks
    if per:
        emit({"ph": "C", "pid": pid, "tid": 0, "ts": us(ns(w.t_start)), "name": "threads by stage",
              "args": {k: round(v, 4) for k, v in sorted(per.items())}})  # fmt: skip


def _window_counters(emit: Callable[[dict], None], gpu_pid: int, w: OpWindow, ns: Callable[[float], int]) -> None:
    if w.gpu is not None and w.gpu.span_us > 0:
        busy = 100.0 * w.gpu.busy_us / w.gpu.span_us
        emit({"ph": "C", "pid": gpu_pid, "tid": 0, "ts": us(ns(w.t_start)), "name": "GPU busy in profiler window (%)",
              "args": {"busy": round(busy, 3)}})  # fmt: skip
        emit({"ph": "C", "pid": gpu_pid, "tid": 0, "ts": us(ns(w.t_end)), "name": "GPU busy in profiler window (%)",
              "args": {"busy": 0}})  # fmt: skip


def _allocator(emit: Callable[[dict], None], gpu_pid: int, a: AllocatorReading, ns: Callable[[float], int]) -> None:
    emit({"ph": "C", "pid": gpu_pid, "tid": 0, "ts": us(max(0, ns(a.t))),
          "name": f"CUDA allocator cuda:{a.device} (MiB)",
          "args": {"allocated": round(a.allocated / MIB, 3), "reserved": round(a.reserved / MIB, 3),
                   "peak allocated": round(a.peak_allocated / MIB, 3)}})  # fmt: skip
    if a.alloc_retries or a.ooms:
        emit({"ph": "C", "pid": gpu_pid, "tid": 0, "ts": us(max(0, ns(a.t))),
              "name": f"CUDA allocator cuda:{a.device} retries and OOMs",
              "args": {"retries": a.alloc_retries, "ooms": a.ooms}})  # fmt: skip


NVML_COUNTERS = (
    ("utilization (%)", (("gpu", "util_gpu", 1), ("memory", "util_memory", 1), ("sm (GPM)", "sm_util", 1),
                         ("dram bandwidth (GPM)", "dram_bw_util", 1), ("tensor (GPM)", "tensor_util", 1))),
    ("memory (MiB)", (("used", "memory_used", MIB), ("target", "process_memory", MIB),
                      ("total", "memory_total", MIB))),
    ("PCIe (MB/s)", (("tx", "pcie_tx_kbs", 1000), ("rx", "pcie_rx_kbs", 1000))),
    ("NVLink (MB/s)", (("tx", "nvlink_tx_kbs", 1000), ("rx", "nvlink_rx_kbs", 1000))),
    ("clocks (MHz)", (("sm", "sm_clock_mhz", 1), ("memory", "mem_clock_mhz", 1))),
    ("power (W)", (("power", "power_w", 1),)),
    ("temperature (C)", (("temperature", "temperature_c", 1),)),
)  # fmt: skip


def _nvml(emit: Callable[[dict], None], gpu_pid: int, r: GpuReading, ns: Callable[[float], int]) -> None:
    ts = us(max(0, ns(r.t)))
    for d in r.devices:
        for title, fields in NVML_COUNTERS:
            args = {}
            for key, attr, div in fields:
                v = getattr(d, attr)
                if v is not None:
                    args[key] = round(v / div, 3)
            if args:
                emit({"ph": "C", "pid": gpu_pid, "tid": 0, "ts": ts, "name": f"GPU{d.index} {title}", "args": args})


def _findings(emit: Callable[[dict], None], pid: int, chunk: ChunkFindings, ns: Callable[[float], int]) -> None:
    for f in chunk.findings:
        emit({"ph": "i", "s": "g", "pid": pid, "tid": 0, "ts": us(max(0, ns(chunk.t_start))),
              "name": f"[{f.severity}] {f.rule}: {f.title}", "cat": "finding",
              "args": {"rule": f.rule, "severity": f.severity, "where": list(f.where), "hint": f.hint,
                       "evidence": f.evidence, "over_s": [round(chunk.t_start, 3), round(chunk.t_end, 3)]}})  # fmt: skip
