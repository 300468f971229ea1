"""The schema-1 report document (spec: "report --format json"), built from a snapshot."""

from __future__ import annotations

from typing import Any

from infertop.analysis.snapshot import Snapshot
from infertop.analysis.stages import IDLE

REPORT_VERSION = 1


def _r(x: float, nd: int = 6) -> float:
    return round(float(x), nd)


def build_report(snap: Snapshot, source_kind: str, path: str) -> dict[str, Any]:
    stages = []
    idle = None
    for st in snap.totals:
        if st.name == IDLE:
            idle = {"share_of_all": _r(st.share), "seconds": _r(st.seconds, 3), "samples": st.samples}
            continue
        stages.append(
            {
                "name": st.name,
                "share": _r(st.share),
                "seconds": _r(st.seconds, 3),
                "samples": st.samples,
                "calls": st.calls,
                "latency_ms": None
                if st.latency_ms is None
                else {
                    "p50": _r(st.latency_ms.p50, 3),
                    "p95": _r(st.latency_ms.p95, 3),
                    "p99": _r(st.latency_ms.p99, 3),
                },
            }
        )
    nvml = next((s for s in snap.statuses if s.collector == "nvml"), None)
    gpu_available = nvml is not None and nvml.state == "running"
    reason = None if gpu_available else (nvml.message if nvml else "no GPU readings were collected")
    return {
        "infertop_report": REPORT_VERSION,
        "source": {"kind": source_kind, "path": path},
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
            "samples": snap.samples,
            "errors": snap.errors,
            "coverage": _r(snap.coverage, 4),
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
        "ops": [],
        "gpu": {
            "available": gpu_available,
            "reason": reason,
            "kernel_time_us": {"compute": 0.0, "memory": 0.0, "communication": 0.0},
            "busy_share": None,
            "memcpy": [],
            "memory": None,
        },
        "findings": [],
        "target_exited": snap.exited is not None,
        "warnings": list(snap.notes),
    }
