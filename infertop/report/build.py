"""The schema-2 report document (spec: "report --format json"), built from a snapshot."""

from __future__ import annotations

from typing import Any

from infertop.analysis.findings import evaluate
from infertop.analysis.findings.session import snapshot_input
from infertop.analysis.gpu_series import memory_summary, utilization_summary
from infertop.analysis.snapshot import Snapshot
from infertop.analysis.stages import IDLE
from infertop.config import FindingThresholds
from infertop.report.pauses import gc_dict, loop_dict, requests_dict, tail_dict
from infertop.report.schema import REPORT_VERSION, TOP_OPS


def _r(x: float, nd: int = 6) -> float:
    return round(float(x), nd)


def build_report(
    snap: Snapshot, source_kind: str, path: str, thresholds: FindingThresholds | None = None
) -> dict[str, Any]:
    stages = []
    idle = None
    tails = {t.stage: t for t in snap.tails}
    wall = snap.wall_totals or snap.totals
    cpu = {st.name: st for st in snap.cpu_totals or snap.totals}
    by_name = {st.name: st for st in wall}
    names = list(by_name) + [n for n in cpu if n not in by_name]
    for name in names:
        st = by_name.get(name)
        if name == IDLE:
            if st is not None:
                idle = {"share_of_all": _r(st.share), "seconds": _r(st.seconds, 3), "samples": st.samples}
            continue
        c = cpu.get(name)
        timed = st if st is not None else c
        assert timed is not None
        stages.append(
            {
                "name": name,
                "share": _r(st.share) if st is not None else 0.0,
                "cpu_share": _r(c.share) if c is not None else 0.0,
                "seconds": _r(st.seconds, 3) if st is not None else 0.0,
                "samples": st.samples if st is not None else 0,
                "cpu_samples": c.samples if c is not None else 0,
                "calls": timed.calls,
                "latency_ms": None
                if timed.latency_ms is None
                else {
                    "p50": _r(timed.latency_ms.p50, 3),
                    "p95": _r(timed.latency_ms.p95, 3),
                    "p99": _r(timed.latency_ms.p99, 3),
                },
                "tail": tail_dict(tails[name]) if name in tails else None,
            }
        )
    nvml = next((s for s in snap.statuses if s.collector == "nvml"), None)
    gpu_available = nvml is not None and nvml.state == "running"
    gpu_available = gpu_available or snap.gpu is not None or snap.allocator is not None
    gpu_available = gpu_available or snap.nvml is not None
    reason = None if gpu_available else (nvml.message if nvml else "no GPU readings were collected")
    return {
        "infertop_report": REPORT_VERSION,
        "source": {
            "kind": source_kind,
            "path": path,
            # the wall-clock time of the first event, to place an incident against other clocks
            "start_time": _r(snap.t_first, 6) if snap.t_first else None,
        },
        "target": {
            "pid": snap.target.pid,
            "cmdline": snap.target.cmdline,
            "python": snap.target.python,
            "torch": snap.target.torch,
        },
        "duration_s": _r(snap.duration_s, 3),
        "stages": stages,
        "idle": idle,
        "sampling": {
            "rate_hz": snap.rate_hz,
            "samples": snap.samples,  # active samples of the CPU windows
            "windows": snap.windows,  # py-spy windows, both kinds
            "errors": snap.errors,
            "coverage": _r(snap.coverage, 4),
            # "wall" absent: no wall windows (a recording older than format 1.5): share is cpu_share
            "views": ["wall", "cpu"] if snap.wall_measured else ["cpu"],
        },
        "top_frames": [
            {
                "function": t.frame.function,
                "file": t.frame.file,
                "line": t.frame.line,
                "stage": t.stage,
                "self_share": _r(t.self_share),
                "total_share": _r(t.total_share),
            }
            for t in snap.top
        ],
        "ops": _ops(snap),
        "profiler": {
            "windows": snap.op_windows,
            "seconds": _r(snap.op_seconds, 3),
            "truncated": snap.op_truncated,
        },
        "gpu": {"available": gpu_available, "reason": reason, **_gpu(snap)},
        "gc": gc_dict(snap.pauses.gc if snap.pauses else None),
        "event_loop": loop_dict(snap.pauses.event_loop if snap.pauses else None),
        "requests": requests_dict(snap.requests),
        "findings": [f.as_dict() for f in evaluate(snapshot_input(snap), thresholds)],
        "target_exited": snap.exited is not None,
        "warnings": list(snap.notes),
    }


def _ops(snap: Snapshot) -> list[dict[str, Any]]:
    return [
        {"name": o.name, "device": o.device, "count": o.count, "total_us": _r(o.total_us, 3),
         "self_us": _r(o.self_us, 3), "stage": o.stage, "mean_us": _r(o.mean_us, 3),
         "shapes": o.shapes}
        for o in snap.ops[:TOP_OPS]
    ]  # fmt: skip


def _gpu(snap: Snapshot) -> dict[str, Any]:
    """Kernel time, busy share and copies from the op windows; memory from the allocator and
    NVML; NVML's utilisation series summarised per device."""
    g, mem, nv = snap.gpu, snap.allocator, snap.nvml
    readings = nv.readings if nv is not None else ()
    kinds = {"compute": 0.0, "memory": 0.0, "communication": 0.0}
    return {
        "kernel_time_us": {k: _r(v, 3) for k, v in (g.kernel_time_us if g else kinds).items()},
        "busy_share": None if g is None or g.busy_share is None else _r(g.busy_share),
        "max_gap_us": None if g is None or not g.span_us else _r(g.max_gap_us, 3),
        "memcpy": [
            {"kind": m.kind, "host_memory": m.host_memory, "count": m.count, "bytes": m.bytes,
             "total_us": _r(m.total_us, 3), "mean_gbps": _r(m.mean_gbps, 3)}
            for m in (g.memcpy if g else ())
        ],  # fmt: skip
        "syncs": [
            {"name": y.name, "count": y.count, "total_us": _r(y.total_us, 3)}
            for y in (g.syncs if g else ())
        ],
        # the allocator's numbers beside NVML's for the same device (docs/recording-format.md)
        "memory": memory_summary(readings, mem),
        "utilization": utilization_summary(readings) if readings else None,
        "nvml_interval_s": None if nv is None or nv.interval_s is None else _r(nv.interval_s, 3),
    }
