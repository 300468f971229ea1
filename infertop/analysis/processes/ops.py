"""Per-process torch-profiler numbers of a many-process recording (ranks, merged recordings,
``--children`` with agents in the children): op windows, kernel time, GPU busy share and step
times, from the op windows each process's ``pid`` names (0: the target)."""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

from infertop.analysis.session import Session
from infertop.analysis.stragglers import window_steps


@dataclass
class ProcessOps:
    windows: int = 0
    seconds: float = 0.0  # wall time the windows covered
    kernel_us: dict[str, float] = field(
        default_factory=lambda: {"compute": 0.0, "memory": 0.0, "communication": 0.0}
    )
    busy_us: float = 0.0
    span_us: float = 0.0
    step_ms: list[float] = field(default_factory=list)
    work_ms: list[float] = field(default_factory=list)  # step time less NCCL kernel time

    def as_dict(self) -> dict[str, object]:
        return {
            "windows": self.windows,
            "seconds": round(self.seconds, 3),
            "kernel_time_us": {k: round(v, 3) for k, v in self.kernel_us.items()},
            "gpu_busy_share": round(self.busy_us / self.span_us, 6) if self.span_us else None,
            "steps": len(self.step_ms),
            "step_ms_p50": round(median(self.step_ms), 3) if self.step_ms else None,
            "step_work_ms_p50": round(median(self.work_ms), 3) if self.work_ms else None,
        }


def process_ops(session: Session, t: float | None = None) -> dict[int, ProcessOps]:
    target = session.target.pid or 0
    out: dict[int, ProcessOps] = {}
    for w in session.op_windows_between(None, t):
        p = out.setdefault(w.pid or target, ProcessOps())
        p.windows += 1
        p.seconds += max(0.0, w.t_end - w.t_start)
        for k in w.kernels:
            p.kernel_us[k.kind] = p.kernel_us.get(k.kind, 0.0) + k.total_us
        if w.gpu is not None:
            p.busy_us += w.gpu.busy_us
            p.span_us += w.gpu.span_us
        for _n, step in window_steps(w):
            p.step_ms.append(step.wall_ms)
            p.work_ms.append(step.work_ms)
    return out
