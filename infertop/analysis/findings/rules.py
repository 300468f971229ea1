"""The rules: a registry, each a pure function from evidence (``FindingInput``) to a Finding.

Rules read a ``FindingInput`` (built from a Kineto trace today, from a live session's samples,
op windows and GPU readings as those land) and the thresholds in ``config.FindingThresholds``;
each finding's severity is its band in ``config.SEVERITY_BANDS`` (``_severity``).
Every rule is documented in docs/findings.md with its definition and where the idea is from.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from infertop.agent.payload.events import SYNC_OPS
from infertop.analysis.trace_ops import OutsideOps
from infertop.config import SEVERITY_BANDS, FindingThresholds
from infertop.model.findings import SEVERITY_ORDER, Finding
from infertop.model.rows import OpRow
from infertop.trace.gpu import GpuSummary, quantile

if TYPE_CHECKING:  # types only: a trace report need not load the NVML series module
    from infertop.analysis.cpu_contention import CpuContention
    from infertop.analysis.generation import GenerationSummary
    from infertop.analysis.gpu_series import NvmlBusy
    from infertop.analysis.host_memory import ProcessMemory
    from infertop.analysis.pauses import GcSummary, LoopLagSummary

#: the ops whose self time ``copy-heavy`` counts: data copies (the agent's wider ``COPY_OPS``,
#: which also holds syncs and ``nonzero``, is what it keeps copies and syncs under)
COPYING_OPS = ("aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone")


@dataclass(frozen=True)
class MemoryState:
    total: int | None  # device memory, bytes
    reserved: int | None
    allocated: int | None
    alloc_retries: int = 0
    ooms: int = 0
    source: str = "allocator"  # "nvml": no allocator readings; reserved is NVML's per-process use


@dataclass(frozen=True)
class FindingInput:
    wall_us: float = 0.0
    stage_shares: dict[str, float] = field(default_factory=dict)  # share of active samples
    #: the samples behind each share (empty: not known, no minimum applies)
    stage_samples: dict[str, int] = field(default_factory=dict)
    stage_where: dict[str, tuple[str, ...]] = field(default_factory=dict)  # hottest frames
    queue_latency_share: float | None = None  # queue time / request latency (from spans)
    #: requests joined across processes: their ``ipc`` ms / their latency, and (ipc p50 ms,
    #: request p50 ms); None: no such requests (``ipc-heavy`` reads the samples then)
    ipc_latency_share: float | None = None
    ipc_latency_ms: tuple[float, float] | None = None
    gil_wait_share: float | None = None
    ops: tuple[OpRow, ...] = ()
    #: the CPU ops' self time, summed: the op time that ``copy-heavy`` measures copies against
    #: (None: a trace's, whose ``outside_ops.in_ops_us`` is the same time)
    op_self_us: float | None = None
    outside_ops: OutsideOps | None = None
    #: the op thread's time waiting for a CPU in the windows, of its runnable time (None: not
    #: measured): a thread preempted inside an op or between two has the wait in that timing
    op_thread_waited: float | None = None
    gpu: GpuSummary | None = None
    kernel_durations_us: np.ndarray | None = None
    transfer_bytes: np.ndarray | None = None  # one entry per memcpy (memset excluded)
    #: (copy kind, host memory) -> the ops that made such copies
    copy_sites: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    host_syncs: dict[str, tuple[int, float]] = field(default_factory=dict)  # name -> (count, µs)
    sync_sites: tuple[str, ...] = ()
    memory: MemoryState | None = None
    #: each process's host memory (/proc and its cgroup: analysis/host_memory.py); with
    #: ``host_memory_pids`` the session has several and a finding names its process
    host_memory: tuple[ProcessMemory, ...] = ()
    host_memory_pids: bool = False
    #: each process's threads' waits for a CPU (the kernel's count: analysis/cpu_contention.py)
    cpu: CpuContention | None = None
    #: each stage's tail under memory pressure: (stage, slow calls, the slow calls' share of
    #: time under it, the typical calls'), where tails were computed and host memory read
    memory_tails: tuple[tuple[str, int, float, float | None], ...] = ()
    nvml: NvmlBusy | None = None  # NVML utilisation of the target's GPUs (no profiler needed)
    gc: GcSummary | None = None  # the agent's GC pauses
    event_loop: LoopLagSummary | None = None  # the agent's heartbeats on asyncio loops
    generation: GenerationSummary | None = None  # the agent's generation calls
    #: an LLM engine's model worker: its busy time outside the model's forward, of all of it,
    #: with the samples behind it and the step's p50 ms (None: no engine, or no step timed)
    engine_outside_forward: float | None = None
    engine_worker_samples: int = 0
    engine_step_ms: float | None = None
    #: its scheduler as its own metrics saw it (vLLM): the KV cache's usage (p50, max, 0-1),
    #: the requests it preempted, the most requests waiting; None / 0 where not read
    engine_kv_usage: tuple[float, float] | None = None
    engine_preemptions: int = 0
    engine_waiting_max: int | None = None


Rule = Callable[[FindingInput, FindingThresholds], "Finding | None"]
RULES: dict[str, Rule] = {}


def rule(rule_id: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        RULES[rule_id] = fn
        return fn

    return register


def _severity(band: str, x: float, th: FindingThresholds, at_least: str = "low") -> str:
    """``x``'s severity in the bands ``SEVERITY_BANDS[band]`` (``band``: the rule's id, or
    ``RULE:WHAT`` for its second number); ``at_least``: what other evidence makes it already."""
    return SEVERITY_BANDS[band].severity(x, th, at_least)


def _ops(inp: FindingInput, names: Collection[str]) -> list[OpRow]:
    return [o for o in inp.ops if o.name in names and o.device == "cpu"]


def _ms(us: float) -> str:
    return f"{us / 1000:.1f} ms"


def _starved(inp: FindingInput, th: FindingThresholds, f: Finding) -> Finding:
    """``f``, a rule over the op thread's timings, said to be measured while that thread waited
    for a CPU (``starved_share`` of its runnable time or more) and low at most: its stops are in
    the op times (a copy, which keeps them, read 14 % of forward time on a healthy service whose
    threads waited 56 %: a 2-3 % alone)."""
    w = inp.op_thread_waited
    if w is None or w < th.starved_share:
        return f
    return replace(
        f,
        severity="low",
        title=f"{f.title} — measured while the op thread waited for a CPU {100 * w:.0f}% of the time",
        evidence={**f.evidence, "op_thread_waited_for_cpu": round(w, 3)},
    )


@rule("memcpy-pageable")
def memcpy_pageable(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    if inp.gpu is None:
        return None
    rows = [r for r in inp.gpu.memcpy if r.host_memory == "pageable" and r.kind in ("HtoD", "DtoH")]
    nbytes = sum(r.bytes for r in rows)
    if not rows or nbytes < th.memcpy_pageable_min_bytes:
        return None
    us = sum(r.total_us for r in rows)
    share = us / inp.gpu.busy_us if inp.gpu.busy_us else 0.0
    sites = sorted({s for r in rows for s in inp.copy_sites.get((r.kind, "pageable"), ())})
    return Finding(
        "memcpy-pageable",
        _severity("memcpy-pageable", share, th),
        f"{sum(r.count for r in rows)} host↔device copies from pageable memory "
        f"({nbytes / 1e6:.1f} MB, {_ms(us)}, {100 * share:.1f}% of GPU busy time)",
        {
            "copies": {f"{r.kind} pageable": {"count": r.count, "bytes": r.bytes, "total_us": round(r.total_us, 1),
                                              "mean_gbps": round(r.mean_gbps, 2)} for r in rows},
            "share_of_gpu_busy": round(share, 4),
        },  # fmt: skip
        tuple(sites[:8]),
        "allocate host buffers pinned (tensor.pin_memory(), DataLoader(pin_memory=True)) and "
        "copy with .to(device, non_blocking=True): pageable copies are staged through a "
        "bounce buffer, run slower and block the host",
    )


@rule("memcpy-sync")
def memcpy_sync(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    if inp.wall_us <= 0:
        return None
    calls = dict(inp.host_syncs)
    for op in _ops(inp, SYNC_OPS):
        if op.name == "aten::item":  # _local_scalar_dense is inside it: count once
            calls[op.name] = (op.count, op.total_us)
    blocked = sum(us for c, us in calls.values())
    count = sum(c for c, us in calls.values())
    share = blocked / inp.wall_us
    if share < th.memcpy_sync_blocked_share:
        return None
    per_s = count / (inp.wall_us / 1e6)
    return Finding(
        "memcpy-sync",
        _severity("memcpy-sync", share, th),
        f"the host waits on the GPU {100 * share:.1f}% of the time ({count} blocking calls, {per_s:.1f}/s)",
        {
            "blocked_share": round(share, 4),
            "blocked_us": round(blocked, 1),
            "calls_per_s": round(per_s, 2),
            "calls": {n: {"count": c, "total_us": round(us, 1)} for n, (c, us) in calls.items()},
        },
        tuple(inp.sync_sites[:8]),
        "remove host syncs from the hot path: avoid .item()/.cpu()/.tolist()/print of CUDA "
        "tensors and torch.cuda.synchronize() per step; keep results on the device and read "
        "them once per batch, with non_blocking copies into pinned buffers",
    )


@rule("memcpy-small")
def memcpy_small(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    b = inp.transfer_bytes
    if b is None or len(b) == 0 or inp.wall_us <= 0:
        return None
    small = float((b < th.memcpy_small_bytes).mean())
    per_s = len(b) / (inp.wall_us / 1e6)
    if small < th.memcpy_small_share or per_s < th.memcpy_small_min_per_s:
        return None
    return Finding(
        "memcpy-small",
        _severity("memcpy-small", per_s, th),
        f"{100 * small:.0f}% of {len(b)} transfers are under {th.memcpy_small_bytes // 1024} KiB ({per_s:.0f}/s)",
        {"transfers": int(len(b)), "small_share": round(small, 3), "per_s": round(per_s, 1),
         "median_bytes": int(quantile(b, 0.5))},  # fmt: skip
        (),
        "batch small copies: gather them into one pinned staging tensor and copy once, or keep "
        "the values on the device; each copy pays a launch and a sync",
    )


@rule("copy-heavy")
def copy_heavy(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    copies = _ops(inp, COPYING_OPS)
    copy_us = sum(o.self_us for o in copies)
    # against the op time of the same rows, not the op thread's stretches: those leave out the
    # stops of a thread preempted inside an op (agent/payload/reduce.py: op_time), the rows'
    # copies do not, and on a starved target copies read 178 % of forward time
    forward_us = inp.op_self_us or (inp.outside_ops.in_ops_us if inp.outside_ops else 0.0)
    cpu_share = copy_us / forward_us if forward_us else 0.0
    dtod = [r for r in (inp.gpu.memcpy if inp.gpu else ()) if r.kind == "DtoD"]
    gpu_share = sum(r.total_us for r in dtod) / inp.gpu.busy_us if inp.gpu and inp.gpu.busy_us else 0.0
    share = max(cpu_share, gpu_share)
    if share < th.copy_heavy_share:
        return None
    top = sorted(copies, key=lambda o: -o.self_us)[:5]
    found = Finding(
        "copy-heavy",
        _severity("copy-heavy", share, th),
        f"tensor copies and conversions take {100 * share:.0f}% of "
        + ("forward time" if cpu_share >= gpu_share else "GPU time"),
        {
            "cpu_share_of_forward": round(cpu_share, 4),
            "gpu_dtod_share": round(gpu_share, 4),
            "top_copies": [{"op": o.name, "count": o.count, "self_us": round(o.self_us, 1)} for o in top],
        },
        tuple(o.name for o in top),
        "keep tensors in the dtype, device and layout the model wants: convert inputs once, "
        "drop .contiguous()/.clone() that are not needed, avoid float64 round trips; "
        "torch.compile can fuse what remains",
    )
    return _starved(inp, th, found) if cpu_share >= gpu_share else found


@rule("python-overhead")
def python_overhead(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    o = inp.outside_ops
    if o is None or o.ops < th.python_overhead_min_ops or o.outside_share < th.python_overhead_share:
        return None
    mean = o.in_ops_us / o.ops if o.ops else 0.0
    found = Finding(
        "python-overhead",
        _severity("python-overhead", o.outside_share, th),
        f"{100 * o.outside_share:.0f}% of forward wall time is outside torch ops (Python and dispatch)",
        {"outside_share": round(o.outside_share, 4), "top_level_ops": o.ops,
         "mean_op_us": round(mean, 2), "wall_us": round(o.wall_us, 1)},  # fmt: skip
        tuple(inp.stage_where.get("forward", ())[:5]),
        "move Python work out of the per-op loop: vectorise, batch, or capture the forward with "
        "torch.compile / CUDA graphs so it stops paying interpreter time per op",
    )
    return _starved(inp, th, found)


@rule("tiny-ops")
def tiny_ops(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    k = inp.kernel_durations_us
    if k is not None and len(k) >= 100 and inp.gpu is not None and inp.gpu.busy_share is not None:
        tiny = float((k < th.tiny_ops_us).mean())
        if tiny >= th.tiny_ops_share and inp.gpu.busy_share < th.tiny_ops_gpu_busy:
            return Finding(
                "tiny-ops",
                _severity("tiny-ops", tiny, th),
                f"{100 * tiny:.0f}% of {len(k)} kernels run under {th.tiny_ops_us:g} µs and the "
                f"GPU is busy only {100 * inp.gpu.busy_share:.0f}% of the time",
                {"tiny_share": round(tiny, 3), "kernels": int(len(k)),
                 "median_kernel_us": round(quantile(k, 0.5), 2),
                 "gpu_busy_share": round(inp.gpu.busy_share, 3)},  # fmt: skip
                (),
                "the GPU waits on kernel launches: fuse ops (torch.compile), capture with CUDA "
                "graphs, or batch more work per launch",
            )
    o = inp.outside_ops
    if o is not None and o.ops >= th.python_overhead_min_ops and inp.gpu is None:
        mean = o.in_ops_us / o.ops
        if mean < th.tiny_ops_us and o.outside_share >= th.python_overhead_share:
            return _starved(inp, th, Finding(
                "tiny-ops",
                _severity("tiny-ops:cpu", o.outside_share, th),
                f"{o.ops} top-level ops average {mean:.1f} µs and the op timeline is idle "
                f"{100 * o.outside_share:.0f}% of the time between them",
                {"mean_op_us": round(mean, 2), "top_level_ops": o.ops,
                 "outside_share": round(o.outside_share, 4)},  # fmt: skip
                (),
                "launch-bound: fewer, larger ops (vectorise the loop), or torch.compile",
            ))
    return None


@rule("gpu-idle")
def gpu_idle(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    g = inp.gpu
    if g is None or g.busy_share is None:
        return _gpu_idle_nvml(inp.nvml, th) if inp.nvml is not None else None
    long_gaps = [x for x in g.gaps if x.dur_us >= th.gpu_idle_gap_ms * 1000]
    if g.busy_share >= th.gpu_idle_busy and not long_gaps:
        return None
    return Finding(
        "gpu-idle",
        _severity("gpu-idle", 1 - g.busy_share, th),
        f"the GPU is busy {100 * g.busy_share:.0f}% of the time"
        + (f", with {len(long_gaps)} idle gaps over {th.gpu_idle_gap_ms:g} ms" if long_gaps else ""),
        {"busy_share": round(g.busy_share, 4), "busy_us": round(g.busy_us, 1), "span_us": round(g.span_us, 1),
         "gaps_ms": [round(x.dur_us / 1000, 1) for x in long_gaps[:10]]},  # fmt: skip
        (),
        "find what the GPU waits for in the gaps (the CPU stages beside them: preprocessing, "
        "host syncs, the batching queue) and overlap it with device work",
    )


def _gpu_idle_nvml(n: NvmlBusy, th: FindingThresholds) -> Finding | None:
    """gpu-idle from NVML when no profiler window saw the device: utilization.gpu is the share
    of each sample period (1/6 s to 1 s) in which a kernel ran, so a 0 % reading is a gap."""
    long_gaps = [s for s in n.gaps_s if s * 1000 >= th.gpu_idle_gap_ms]
    if n.busy_share >= th.gpu_idle_busy and not long_gaps:
        return None
    return Finding(
        "gpu-idle",
        _severity("gpu-idle", 1 - n.busy_share, th),
        f"the GPU is busy {100 * n.busy_share:.0f}% of the time while the target works (NVML)"
        + (f", with {len(long_gaps)} idle gaps over {th.gpu_idle_gap_ms:g} ms" if long_gaps else ""),
        {"source": "nvml", "busy_share": round(n.busy_share, 4), "seconds": round(n.seconds, 1),
         "readings": n.readings, "devices": list(n.devices),
         "gaps_s": [round(x, 2) for x in long_gaps[:10]]},  # fmt: skip
        tuple(f"GPU {i}" for i in n.devices),
        "find what the GPU waits for in the gaps (the CPU stages beside them in the GPU panel: "
        "preprocessing, host syncs, the batching queue) and overlap it with device work",
    )


def _stage_rule(rule_id: str, stage: str, attr: str, hint: str) -> Rule:
    def check(inp: FindingInput, th: FindingThresholds) -> Finding | None:
        share = inp.stage_shares.get(stage)
        limit = getattr(th, attr)
        if share is None or share < limit:
            return None
        if inp.stage_samples and inp.stage_samples.get(stage, 0) < th.stage_min_samples:
            return None  # a share of a handful of samples is chance (an API process's wall
            # view held 5 samples of JSON encoding and nothing else in a stage: "100 %")
        return Finding(
            rule_id,
            _severity(rule_id, share, th),
            f"{stage} takes {100 * share:.0f}% of active time",
            {"share": round(share, 4), "threshold": limit},
            tuple(inp.stage_where.get(stage, ())[:5]),
            hint,
        )

    return check


RULES["preprocess-hot"] = _stage_rule(
    "preprocess-hot", "preprocess", "preprocess_hot_share",
    "use a fast tokenizer (the Rust `tokenizers` backend, use_fast=True), tokenize in batches, "
    "cache repeated prompts, or move preprocessing to a worker pool off the model thread",
)  # fmt: skip
RULES["serialize-hot"] = _stage_rule(
    "serialize-hot", "serialize", "serialize_hot_share",
    "serialize less and faster: orjson/msgspec instead of json, no indent, round floats, send "
    "token ids instead of per-token objects, move tensors to lists once per batch",
)  # fmt: skip

_IPC_HINT = (
    "hop less and carry less: pass tensors through shared memory (torch.multiprocessing, or "
    "a shared_memory buffer) instead of pickling them, send token ids rather than text or "
    "objects, batch the messages, or run the stage in the process that needs its result"
)
_ipc_by_samples = _stage_rule("ipc-heavy", "ipc", "ipc_heavy_share", _IPC_HINT)


@rule("ipc-heavy")
def ipc_heavy(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    """Of request latency where requests were followed across processes (``requests``: the
    time outside every call, queue and batch wait, in the API process and on the way), else of
    the active samples."""
    share = inp.ipc_latency_share
    if share is None:
        return _ipc_by_samples(inp, th)
    limit = th.ipc_heavy_share
    if share < limit:
        return None
    evidence: dict[str, float] = {"share_of_latency": round(share, 4), "threshold": limit}
    if inp.ipc_latency_ms is not None:
        evidence["ipc_p50_ms"] = round(inp.ipc_latency_ms[0], 3)
        evidence["request_p50_ms"] = round(inp.ipc_latency_ms[1], 3)
    return Finding(
        "ipc-heavy",
        _severity("ipc-heavy", share, th),
        f"the hop between processes takes {100 * share:.0f}% of request latency",
        evidence,
        tuple(inp.stage_where.get("ipc", ())[:5]),
        _IPC_HINT,
    )


@rule("queue-wait")
def queue_wait(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    share = inp.queue_latency_share
    if share is None or share < th.queue_wait_share:
        return None
    return Finding(
        "queue-wait",
        _severity("queue-wait", share, th),
        f"requests spend {100 * share:.0f}% of their latency waiting in the batching queue",
        {"queue_share_of_latency": round(share, 4)},
        tuple(inp.stage_where.get("queue", ())[:5]),
        "shorten the batch timeout or cap batch size by latency; add model replicas when the "
        "queue is long because the model is saturated",
    )


@rule("engine-step-overhead")
def engine_step_overhead(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    """An LLM engine's step spends its time outside the model's forward: measured on the
    model worker (the process that runs it), whose busy time between steps is the step's
    inputs, sampling and hops; a lower bound (the worker's wait while the engine core
    schedules is not in it)."""
    share = inp.engine_outside_forward
    if share is None or share < th.engine_step_overhead_share:
        return None
    if inp.engine_worker_samples < th.stage_min_samples:
        return None
    evidence: dict[str, float] = {
        "outside_forward_share": round(share, 4), "threshold": th.engine_step_overhead_share,
        "worker_samples": inp.engine_worker_samples,
    }  # fmt: skip
    if inp.engine_step_ms is not None:
        evidence["step_p50_ms"] = round(inp.engine_step_ms, 3)
    return Finding(
        "engine-step-overhead",
        _severity("engine-step-overhead", share, th),
        f"the model worker spends {100 * share:.0f}% of its step outside the model's forward",
        evidence,
        tuple(w for s in ("prepare", "postprocess", "ipc") for w in inp.stage_where.get(s, ())[:2]),
        "on a GPU this is time the GPU idles: larger batches per step (max_num_seqs, "
        "max_num_batched_tokens), CUDA graphs and async scheduling to overlap the step's "
        "preparation with the forward; profile the worker's prepare/sample stages",
    )


@rule("gil-contention")
def gil_contention(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    share = inp.gil_wait_share
    if share is None or share < th.gil_contention_share:
        return None
    return Finding(
        "gil-contention",
        _severity("gil-contention", share, th),
        f"the GIL was held without a switch {100 * share:.0f}% of the time, in stretches of "
        "10 ms or more, while other Python threads of the process waited for it",
        {"gil_wait_share": round(share, 4)},
        (),
        "move CPU-bound Python (tokenizers, JSON) to processes or GIL-releasing libraries; "
        "fewer Python threads competing with the model thread",
    )


@rule("gc-pauses")
def gc_pauses(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    g = inp.gc
    if g is None:
        return None
    hit = g.long_pause_calls or 0.0
    long_pauses = g.max_ms >= th.gc_long_pause_ms and hit >= th.gc_long_pause_calls
    if g.share < th.gc_pause_share and not long_pauses:
        return None
    full = dict(g.by_generation).get(2)
    title = f"garbage collection takes {100 * g.share:.1f}% of wall time ({g.count} collections"
    title += f", longest {g.max_ms:.0f} ms)"
    if long_pauses:
        title += f"; a pause of {th.gc_long_pause_ms:.0f} ms or more lands in {100 * hit:.1f}% of calls"
    return Finding(
        "gc-pauses",
        _severity("gc-pauses", g.share, th, at_least="high" if long_pauses else "low"),
        title,
        {"share": round(g.share, 4), "count": g.count, "max_ms": round(g.max_ms, 2),
         "full_collections": full.count if full else 0,
         "full_p99_ms": round(full.p99_ms, 2) if full else None,
         "long_pause_calls": None if g.long_pause_calls is None else round(g.long_pause_calls, 4)},  # fmt: skip
        (),
        "call gc.freeze() after the model and caches are loaded (long-lived objects leave the "
        "collector's heap), raise gc.set_threshold() for the young generation, avoid reference "
        "cycles in per-request objects, or collect between requests (gc.collect() when idle)",
    )


@rule("event-loop-lag")
def event_loop_lag(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    lag = inp.event_loop
    if lag is None or lag.p99_ms < th.event_loop_lag_p99_ms:
        return None
    return Finding(
        "event-loop-lag",
        _severity("event-loop-lag", lag.p99_ms, th),
        f"the asyncio event loop runs callbacks late: p99 lag {lag.p99_ms:.0f} ms "
        f"(max {lag.max_ms:.0f} ms)",
        {"p50_ms": round(lag.p50_ms, 2), "p99_ms": round(lag.p99_ms, 2),
         "max_ms": round(lag.max_ms, 2), "beats": lag.beats, "loops": lag.loops},  # fmt: skip
        (),
        "something blocks the loop: run CPU-bound or blocking calls (model forward, tokenizer, "
        "file or socket I/O without await) in a thread or process pool "
        "(loop.run_in_executor / asyncio.to_thread); every request on the loop waits for them",
    )


def severity_rank(severity: str) -> int:
    """Where a severity ranks: high first. The one ranking of findings, for every view."""
    return SEVERITY_ORDER[severity]


def ranked(found: Iterable[Finding]) -> list[Finding]:
    """Findings most severe first; equal ones keep their order (the rules' order)."""
    return sorted(found, key=lambda f: severity_rank(f.severity))


def evaluate(inp: FindingInput, thresholds: FindingThresholds | None = None) -> list[Finding]:
    """Every rule that fires, most severe first."""
    th = thresholds or FindingThresholds()
    return ranked(f for fn in RULES.values() if (f := fn(inp, th)) is not None)


__all__ = ["Finding", "FindingInput", "MemoryState", "RULES", "evaluate", "ranked", "severity_rank"]
