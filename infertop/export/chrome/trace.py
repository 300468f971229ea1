"""``infertop export TRACE.json[.gz] --format chrome``: a torch.profiler trace, re-emitted so that
every viewer draws all of it.

Kineto's own JSON sometimes puts ranges on one thread that overlap without nesting (user
annotations against ops, a step that ends inside an op); Perfetto drops those. Here every
track's slices are sorted and each slice goes to the first lane of its track where it nests
(``lanes.py``), times are whole nanoseconds from the trace's first event, GPU work keeps its
device/stream tracks with an arrow from the runtime call that launched it (CUDA correlation id),
and the findings of ``infertop report`` on the trace are instant events at its start.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from infertop import __version__
from infertop.analysis.findings import evaluate
from infertop.analysis.findings.trace import trace_input
from infertop.config import FindingThresholds
from infertop.export.chrome.counters import finding_event
from infertop.export.jsonout import TraceEventWriter
from infertop.export.lanes import StartOrderedLanes
from infertop.export.prelude import ExportResult, read_trace_to_export
from infertop.trace.gpu import summarize_gpu
from infertop.trace.table import CAT, CATEGORIES, GPU_CATS, KinetoTrace

LANE_TID = 0x7F000000  # lanes beyond the first get synthetic tids from here, per process
LAUNCH = (CAT["cuda_runtime"], CAT["cuda_driver"])


def _us(ns: int) -> int | float:
    return ns // 1000 if ns % 1000 == 0 else round(ns / 1000, 3)


def export_chrome_trace(
    path: str, out: str, thresholds: FindingThresholds | None = None
) -> ExportResult:
    trace = read_trace_to_export(path)
    writer = TraceEventWriter(out)
    try:
        n = write_trace_events(trace, writer.event, thresholds)
        other: dict[str, Any] = {
            "exporter": f"infertop {__version__}",
            "source": os.path.abspath(path),
            "kind": "kineto",
            "events_in": len(trace),
            "events_out": n,
        }
        if trace.base_ns:
            other["t0_unix_s"] = (
                trace.base_ns + float(trace.ts.min() if len(trace) else 0) * 1000
            ) / 1e9
        if trace.rank is not None:
            other["rank"] = trace.rank
        writer.finish(other)
    except BaseException:
        writer.abort()
        raise
    return ExportResult(
        out, writer.count, f"{trace.skipped} malformed events skipped" if trace.skipped else None
    )


def write_trace_events(
    trace: KinetoTrace, emit: Any, thresholds: FindingThresholds | None = None
) -> int:
    count = 0
    if len(trace) == 0:
        return count
    t0 = float(trace.ts.min())
    start = np.round((trace.ts - t0) * 1000).astype(np.int64)
    end = np.maximum(np.round((trace.ts + trace.dur - t0) * 1000).astype(np.int64), start)
    gpu = np.isin(trace.cat, GPU_CATS) | (trace.cat == CAT["gpu_user_annotation"])
    # one track per (pid, tid); order each by start, longer first, then file order
    order = np.lexsort((np.arange(len(trace)), -(end - start), start, trace.tid, trace.pid))
    names = trace.names
    cats = CATEGORIES
    tids_used: dict[int, set[int]] = {}
    lane_tid: dict[tuple[int, int, int], int] = {}
    track_of = np.zeros(len(trace), dtype=np.int64)
    launch_at: dict[int, tuple[int, int, int]] = {}  # correlation -> (pid, track, ts)
    lanes = StartOrderedLanes(max_lanes=64)  # each thread's own from its first event on
    current: tuple[int, int] | None = None
    dropped = 0
    pids, tids, corr = trace.pid, trace.tid, trace.correlation
    for i in order.tolist():
        pid, tid = int(pids[i]), int(tids[i])
        if current != (pid, tid):
            current = (pid, tid)
            lanes = StartOrderedLanes(max_lanes=64)
            tids_used.setdefault(pid, set()).add(tid)
        s, e = int(start[i]), int(end[i])
        lane = lanes.place(s, e)
        if lane is None:
            dropped += 1
            track_of[i] = -1
            continue
        track = tid
        if lane:
            key = (pid, tid, lane)
            track = lane_tid.get(key, 0)
            if not track:
                track = lane_tid[key] = LANE_TID + len(lane_tid)
        track_of[i] = track
        args: dict[str, Any] = {}
        c = int(corr[i])
        if c >= 0:
            args["correlation"] = c
        nb = int(trace.nbytes[i])
        if nb >= 0:
            args["bytes"] = nb
        emit(
            {
                "ph": "X",
                "pid": pid,
                "tid": track,
                "ts": _us(s),
                "dur": _us(e - s),
                "name": names[int(trace.name[i])],
                "cat": cats[int(trace.cat[i])],
                **({"args": args} if args else {}),
            }
        )
        count += 1
        if c >= 0 and int(trace.cat[i]) in LAUNCH:
            launch_at[c] = (pid, track, s)
    # flows: runtime launch -> the kernel / copy it launched
    flow = 0
    for i in np.flatnonzero(np.isin(trace.cat, GPU_CATS) & (corr >= 0)).tolist():
        src = launch_at.get(int(corr[i]))
        if src is None or track_of[i] < 0:
            continue
        flow += 1
        emit(
            {
                "ph": "s",
                "id": flow,
                "pid": src[0],
                "tid": src[1],
                "ts": _us(src[2]),
                "name": "launch",
                "cat": "launch",
            }
        )
        emit(
            {
                "ph": "f",
                "bp": "e",
                "id": flow,
                "pid": int(pids[i]),
                "tid": int(track_of[i]),
                "ts": _us(int(start[i])),
                "name": "launch",
                "cat": "launch",
            }
        )
        count += 2
    # names: GPU processes are devices, their threads streams
    gpu_pids = {int(p) for p in np.unique(pids[gpu])}
    for pid, tset in sorted(tids_used.items()):
        if pid in gpu_pids:
            dev = trace.device_names.get(pid)
            pname = f"GPU {pid}" + (f" ({dev})" if dev else "")
        else:
            pname = f"host process {pid}" + (
                f" (rank {trace.rank})" if trace.rank is not None else ""
            )
        emit({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": pname}})
        emit(
            {
                "ph": "M",
                "pid": pid,
                "tid": 0,
                "name": "process_sort_index",
                "args": {"sort_index": (1 << 20) + pid if pid in gpu_pids else pid},
            }
        )
        for tid in sorted(tset):
            label = f"stream {tid}" if pid in gpu_pids else f"thread {tid}"
            emit(
                {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": label}}
            )
        count += 2 + len(tset)
    for (pid, tid, lane), track in lane_tid.items():
        base = f"stream {tid}" if pid in gpu_pids else f"thread {tid}"
        emit(
            {
                "ph": "M",
                "pid": pid,
                "tid": track,
                "name": "thread_name",
                "args": {"name": f"{base} (overlapping {lane})"},
            }
        )
        count += 1
    # findings, as infertop report finds them, at the trace's start
    gsum = summarize_gpu(trace)
    first_pid = int(pids[order[0]])
    for f in evaluate(trace_input(trace, gsum), thresholds):
        emit(finding_event(f, first_pid, 0))
        count += 1
    if dropped:
        emit(
            {
                "ph": "i",
                "s": "g",
                "pid": first_pid,
                "tid": 0,
                "ts": 0,
                "name": f"{dropped} overlapping events left out",
                "cat": "infertop",
            }
        )
        count += 1
    return count
