"""Evidence for the findings from a live session or recording: a snapshot, summarised.

Stage rules read the py-spy shares; op rules read the agent's torch-profiler windows; memory
rules the allocator readings. What a session has not seen (no agent, no GPU) simply leaves
those rules silent.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from infertop.analysis.findings.rules import FindingInput, MemoryState
from infertop.analysis.gpu_series import NvmlBusy, memory_summary, nvml_busy
from infertop.analysis.host_memory import ProcessMemory
from infertop.analysis.processes.roles import has_llm_engine
from infertop.analysis.snapshot import Snapshot
from infertop.analysis.stages import IDLE, QUEUE, caught_waiting
from infertop.analysis.trace_ops import OutsideOps
from infertop.model.rows import OpRow
from infertop.trace.gpu import GpuSummary


def _merged_ops(snap: Snapshot) -> tuple[OpRow, ...]:
    """The agent's rows are per stage; rules want one row per (op, device)."""
    acc: dict[tuple[str, str], list[float]] = {}
    for r in snap.torch.ops:
        a = acc.setdefault((r.name, r.device), [0, 0.0, 0.0])
        a[0] += r.count
        a[1] += r.total_us
        a[2] += r.self_us
    rows = [OpRow(n, d, int(c), t, s) for (n, d), (c, t, s) in acc.items()]
    return tuple(sorted(rows, key=lambda r: -r.self_us))


def snapshot_input(snap: Snapshot) -> FindingInput:
    # wall shares, whichever view the UI shows (a finding does not change with the view)
    totals = [s for s in snap.wall_totals or snap.totals if s.name != IDLE]
    shares = {s.name: s.share for s in totals}
    where: dict[str, list[str]] = {}
    for t in snap.top:
        if t.stage != QUEUE and caught_waiting([t.frame]):
            # a wait is no place to fix work in (vLLM's engine core spinning on its worker,
            # its forward); a queue's wait is where queue-wait points
            continue
        where.setdefault(t.stage, []).append(
            f"{t.frame.function} ({t.frame.short_file}:{t.frame.line})"
        )
    ops = _merged_ops(snap)
    cpu_self = sum(o.self_us for o in ops if o.device == "cpu")
    gpu = None
    if snap.torch.gpu is not None and snap.torch.gpu.span_us > 0:
        g = snap.torch.gpu
        gpu = GpuSummary(
            kernel_time_us=dict(g.kernel_time_us),
            busy_us=g.busy_us,
            span_us=g.span_us,
            gaps=(),
            memcpy=tuple(g.memcpy),
            sync_events=0,
            syncs=tuple(g.syncs),
            launch_delay_us=None,
        )
    memory = session_memory(snap)
    return FindingInput(
        wall_us=snap.torch.seconds * 1e6,
        stage_shares=shares,
        stage_samples={s.name: s.samples for s in totals},
        stage_where={k: tuple(v) for k, v in where.items()},
        ops=ops,
        op_self_us=cpu_self or None,
        outside_ops=_outside_ops(snap),
        op_thread_waited=_op_thread_waited(snap),
        kernel_durations_us=_kernel_durations(snap),
        transfer_bytes=_transfer_bytes(snap),
        gpu=gpu,
        memory=memory,
        **host_memory_of(snap),
        cpu=snap.cpu,
        nvml=_nvml_busy(snap),
        gc=snap.pauses.gc if snap.pauses else None,
        event_loop=snap.pauses.event_loop if snap.pauses else None,
        queue_latency_share=_queue_share(snap),
        **ipc_of_requests(snap),
        gil_wait_share=snap.pauses.gil_share if snap.pauses else None,
        generation=snap.generation,
        **_engine(snap),
    )


class EngineInput(TypedDict, total=False):
    """``FindingInput``'s fields of an LLM engine's model worker."""

    engine_outside_forward: float
    engine_worker_samples: int
    engine_step_ms: float | None
    engine_kv_usage: tuple[float, float]
    engine_preemptions: int
    engine_waiting_max: int


class IpcInput(TypedDict, total=False):
    """``FindingInput``'s fields of the requests followed into other processes."""

    ipc_latency_share: float
    ipc_latency_ms: tuple[float, float]


class HostMemoryInput(TypedDict, total=False):
    """``FindingInput``'s fields of the processes' host memory."""

    host_memory: tuple[ProcessMemory, ...]
    host_memory_pids: bool
    memory_tails: tuple[tuple[str, int, float, float | None], ...]


def host_memory_of(snap: Snapshot) -> HostMemoryInput:
    """Each process's host memory; in the view of one process (``snap.process``), its own;
    and each stage's slow calls under memory pressure, where the snapshot has tails."""
    hm = snap.host_memory
    if hm is None:
        return {}
    procs = hm.processes
    if snap.process is not None:
        procs = tuple(p for p in procs if p.pid == snap.process)
    tails = tuple(
        (t.stage, t.slow_calls, share, t.typical_memory)
        for t in snap.tails
        if (share := t.overlaps.get("memory")) is not None
    )
    return {"host_memory": procs, "host_memory_pids": len(procs) > 1, "memory_tails": tails}


def _engine(snap: Snapshot) -> EngineInput:
    """An LLM engine's model worker's time outside the forward (analysis/engine.py)."""
    e = snap.engine
    if e is None:
        return {}
    out: EngineInput = {}
    if e.outside_forward is not None:
        out["engine_outside_forward"] = e.outside_forward
        out["engine_worker_samples"] = sum(n for s, n in e.worker if s != "infertop")
        out["engine_step_ms"] = e.step_ms[0] if e.step_ms is not None else None
    if (sc := e.scheduler) is not None:  # its scheduler, as its own metrics saw it
        out["engine_kv_usage"] = sc.kv_usage
        out["engine_preemptions"] = sc.preemptions
        out["engine_waiting_max"] = sc.waiting[1]
    return out


def _queue_share(snap: Snapshot) -> float | None:
    """The pipeline threads' wall time waiting in a queue, of their time in every stage (the
    wall view: a thread blocked in ``queue.get`` is waiting, not idle); None without it."""
    if not snap.wall_measured:
        return None
    shares = {s.name: s.share for s in snap.wall_totals if s.name != IDLE}
    total = sum(shares.values())
    return shares.get("queue", 0.0) / total if total else None


def ipc_of_requests(snap: Snapshot) -> IpcInput:
    """``ipc`` of the requests followed into other processes (the whole session's where the
    snapshot has them, else the last seconds'): its share of their latency and its p50 beside
    theirs. Empty without such requests."""
    req = snap.requests or snap.recent_requests
    if req is None or req.joined == "none" or not any(st == "ipc" for st, *_ in req.breakdown_ms):
        return {}
    if has_llm_engine(snap.processes):
        # behind an LLM engine (vLLM, SGLang) the API process's request waits for the
        # engine's steps, its scheduling, prefill and decode: not a hop (ipc-heavy reads the
        # samples' ipc then)
        return {}
    share = next((every for st, every, _slow in req.stage_shares if st == "ipc"), 0.0)
    p50 = next(p for st, p, _p99 in req.breakdown_ms if st == "ipc")
    return {"ipc_latency_share": share, "ipc_latency_ms": (p50, req.latency_ms.p50)}


def session_memory(snap: Snapshot) -> MemoryState | None:
    """The allocator's reserved/allocated against NVML's device total; without the agent,
    NVML's per-process memory of the target (context included) stands in for reserved."""
    readings = snap.nvml.readings if snap.nvml is not None else ()
    m = memory_summary(readings, snap.torch.allocator, snap.nvml.fold if snap.nvml is not None else None)
    if m is None:
        return None
    a = snap.torch.allocator
    if a is not None:
        return MemoryState(m["total"], a.reserved, a.allocated, a.alloc_retries, a.ooms)  # type: ignore[arg-type]
    if m["process"] is None:
        return None
    return MemoryState(m["total"], m["process"], None, source="nvml")  # type: ignore[arg-type]


def _nvml_busy(snap: Snapshot) -> NvmlBusy | None:
    """NVML busy share over the readings taken while py-spy saw the target at work."""
    if snap.nvml is None:
        return None
    return nvml_busy(snap.nvml.readings, snap.nvml.working, snap.nvml.fold)


def _outside_ops(snap: Snapshot) -> OutsideOps | None:
    """Time outside torch ops inside the forward, from the windows' op_time (the op thread's
    stretches of model work); None where no window measured it (older agents): then
    python-overhead and tiny-ops stay silent (copy-heavy reads the op rows alone)."""
    t = snap.torch.op_time
    if t is not None and t.wall_us > 0:
        return OutsideOps(wall_us=t.wall_us, in_ops_us=min(t.in_ops_us, t.wall_us), ops=t.ops)
    return None


def _op_thread_waited(snap: Snapshot) -> float | None:
    """The op thread's time waiting for a CPU in the windows, of its runnable time; None where
    no window measured it (older agents, traces)."""
    t = snap.torch.op_time
    return None if t is None else t.waited


def _kernel_durations(snap: Snapshot) -> np.ndarray | None:
    """One duration per kernel, as near as windows tell (they keep count, total, min and max
    per kernel name): every call of a name at its mean, clamped to [min, max]."""
    g = snap.torch.gpu
    kernels = [k for k in (g.kernels if g else ()) if k.kind != "memory" and k.count > 0]
    if not kernels:
        return None
    means = [min(max(k.total_us / k.count, k.min_us), k.max_us) for k in kernels]
    return np.repeat(np.array(means, dtype=np.float64), [k.count for k in kernels])


def _transfer_bytes(snap: Snapshot) -> np.ndarray | None:
    """One size per copy (memsets excluded), each at its direction and memory kind's mean."""
    rows = [m for m in (snap.torch.gpu.memcpy if snap.torch.gpu else ()) if m.kind != "memset" and m.count > 0]
    if not rows:
        return None
    return np.repeat(np.array([m.bytes / m.count for m in rows]), [m.count for m in rows])
