"""The process selector's rows (key ``W``): every process of a many-process session with
what tells them apart at a glance — who it is, how busy, how much GPU memory, whether the
agent sees its torch ops.

``cpu`` is read from the samples, so it is the same live and in a replay: the active
(non-idle) samples of the process per sampler tick over the last ``recent_s`` seconds, i.e.
how many of its Python threads were on a CPU or in a non-waiting call on average (1.0 = one
core's worth). ``samples_per_s`` counts every sample of its threads, idle ones included:
how much py-spy sees of it (0 for a non-Python process or one py-spy cannot read).
"""

from __future__ import annotations

from dataclasses import dataclass

from infertop.analysis.processes.shares import exit_times, gpu_memory_by_pid
from infertop.analysis.session import Session
from infertop.analysis.stages import IDLE


@dataclass(frozen=True, slots=True)
class ProcessRow:
    pid: int
    role: str
    cmdline: str
    cpu: float  # cores' worth of active samples over the recent seconds
    samples_per_s: float
    gpu_memory: int | None  # bytes on all GPUs (NVML); None: no NVML readings
    op_windows: int  # torch.profiler windows of its agent in the session (0: no agent data)
    exited: bool


def process_rows(
    session: Session,
    labels: tuple[tuple[int, str], ...],
    t: float | None = None,
    recent_s: float = 5.0,
) -> tuple[ProcessRow, ...]:
    """One row per process in ``labels`` ((pid, role), in display order)."""
    if not labels:
        return ()
    t_now = t if t is not None else session.t_last
    target = session.target.pid or 0
    owner = session.thread_pid
    active: dict[int, int] = {}
    seen: dict[int, int] = {}
    ticks: dict[int, int] = {}  # per process: sampler ticks of the windows it appears in
    sampled = 0.0  # seconds the CPU windows covered
    for ws in session.windows_between(t_now - recent_s, t):
        w = ws.window
        if ws.wall:  # CPU and samples/s are of the CPU windows (a wall window has idle samples)
            continue
        sampled += w.t_end - w.t_start
        pids_here: set[int] = set()
        for tid, sid, n in w.counts:
            pid = owner.get(tid, target)
            pids_here.add(pid)
            seen[pid] = seen.get(pid, 0) + n
            if session.stage_of(sid) != IDLE:
                active[pid] = active.get(pid, 0) + n
        for pid in pids_here:
            ticks[pid] = ticks.get(pid, 0) + w.ticks
    span = max(1e-9, sampled)
    ops: dict[int, int] = {}
    for key, folded in session.folded_ops_by_pid.items():  # a bounded session's older windows
        ops[key or target] = ops.get(key or target, 0) + folded.windows
    for ow in session.op_windows_between(None, t):
        pid = ow.pid or target
        ops[pid] = ops.get(pid, 0) + 1
    gpu = gpu_memory_by_pid(session, t)
    gone = exit_times(session, t)
    rows = []
    for pid, role in labels:
        proc = session.processes.get(pid)
        rows.append(
            ProcessRow(
                pid,
                role,
                proc.cmdline if proc is not None else (session.target.cmdline or ""),
                active.get(pid, 0) / ticks[pid] if ticks.get(pid) else 0.0,
                seen.get(pid, 0) / span if seen else 0.0,
                None if gpu is None else gpu.get(pid, 0),
                ops.get(pid, 0),
                pid in gone,
            )
        )
    return tuple(rows)
