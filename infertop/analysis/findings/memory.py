"""The memory rules: the device's memory near its end, the allocator's slack, the KV cache's
headroom, and a process's host memory growing past warm-up (docs/findings.md). Registered in
``rules.RULES`` after the rules of ``rules.py`` (the package imports this module)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infertop.analysis.findings.rules import FindingInput, _severity, rule
from infertop.config import FindingThresholds
from infertop.model.findings import Finding

if TYPE_CHECKING:
    from infertop.analysis.host_memory import Growing, ProcessMemory


@rule("gpu-memory-pressure")
def memory_pressure(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    m = inp.memory
    if m is None:
        return None
    ratio = m.reserved / m.total if m.reserved is not None and m.total else 0.0
    if ratio < th.memory_pressure_reserved and m.alloc_retries == 0 and m.ooms == 0:
        return None
    sev = _severity(
        "gpu-memory-pressure", ratio, th,
        at_least="high" if m.ooms else "medium" if m.alloc_retries else "low",
    )  # fmt: skip
    return Finding(
        "gpu-memory-pressure",
        sev,
        ("reserved GPU memory" if m.source == "allocator" else "the target's GPU memory (NVML)")
        + f" at {100 * ratio:.0f}% of the device"
        + (f", {m.alloc_retries} allocator retries" if m.alloc_retries else "")
        + (f", {m.ooms} OOMs" if m.ooms else ""),
        {
            "reserved_share": round(ratio, 4),
            "reserved": m.reserved,
            "total": m.total,
            "alloc_retries": m.alloc_retries,
            "ooms": m.ooms,
            "source": m.source,
        },  # fmt: skip
        (),
        "lower the batch size or max sequence length, free cached tensors between requests, "
        "or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to cut fragmentation",
    )


@rule("allocator-fragmentation")
def fragmentation(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    m = inp.memory
    if m is None or m.reserved is None or m.allocated is None or m.reserved <= 0:
        return None
    slack = m.reserved - m.allocated
    share = slack / m.reserved
    if share < th.fragmentation_share or slack < th.fragmentation_min_bytes:
        return None
    # the allocator retrying (its cudaMalloc failed, its cache freed and tried again) is that
    # slack costing time: at least medium
    return Finding(
        "allocator-fragmentation",
        _severity("allocator-fragmentation", share, th, at_least="medium" if m.alloc_retries else "low"),
        f"{slack / 2**30:.1f} GiB reserved but not allocated ({100 * share:.0f}% of reserved)"
        + (f", the allocator retrying ({m.alloc_retries} retries)" if m.alloc_retries else ""),
        {
            "reserved": m.reserved,
            "allocated": m.allocated,
            "slack_share": round(share, 4),
            "device_total": m.total,
            "alloc_retries": m.alloc_retries,
        },  # fmt: skip
        (),
        "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, keep tensor shapes stable "
        "(pad to buckets), and avoid torch.cuda.empty_cache() churn",
    )


@rule("kv-cache-headroom")
def kv_cache_headroom(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    """The largest batch seen at the longest sequence seen would hold more KV cache than the
    device memory left: one such batch away from an out-of-memory error. For an LLM engine
    that pages its cache (vLLM), its blocks near full or requests preempted for want of them."""
    g = inp.generation
    if g is None or g.kv_cache is None:
        return _engine_kv_cache(inp, th)
    kv = g.kv_cache
    if kv.headroom_bytes is None or kv.worst_case_bytes is None:
        return None
    need = kv.worst_case_bytes - kv.bytes_max  # beyond what the largest call already held
    if need <= kv.headroom_bytes * th.kv_headroom_share:
        return None
    batch = int(g.batch_size.max) if g.batch_size is not None else None
    length = None
    if g.prompt_tokens is not None and g.new_tokens is not None:
        length = int(g.prompt_tokens.max + g.new_tokens.max)
    m = inp.memory
    sev = _severity(
        "kv-cache-headroom", need - kv.headroom_bytes, th,
        at_least="high" if m is not None and m.ooms else "low",
    )  # fmt: skip
    return Finding(
        "kv-cache-headroom",
        sev,
        f"the KV cache of a batch of {batch} at {length} tokens would need "
        f"{kv.worst_case_bytes / 2**30:.2f} GiB, {need / 2**30:.2f} GiB more than the largest seen; "
        f"{kv.headroom_bytes / 2**30:.2f} GiB of {kv.device} memory is left",
        {
            "worst_case_bytes": kv.worst_case_bytes,
            "bytes_max": kv.bytes_max,
            "bytes_per_token": None if kv.bytes_per_token is None else round(kv.bytes_per_token, 1),
            "headroom_bytes": kv.headroom_bytes,
            "max_batch": batch,
            "max_tokens": length,
            "device": kv.device,
            "ooms": m.ooms if m is not None else None,
        },  # fmt: skip
        (),
        "cap the batch size or the sequence length (max_new_tokens, truncation) so that batch x "
        "length x bytes per token fits, or use a paged or quantised cache (a static cache sized "
        "up front, QuantizedCache, or a server with paged attention); see gpu-memory-pressure",
    )


def _engine_kv_cache(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    """An engine's paged KV cache (vLLM's scheduler, read by the agent): its usage reached
    ``kv_usage_share`` of its blocks, or it preempted requests (their blocks taken back, their
    tokens computed again when they are scheduled anew)."""
    usage, pre = inp.engine_kv_usage, inp.engine_preemptions
    if usage is None or (usage[1] < th.kv_usage_share and pre == 0):
        return None
    title = f"the engine's KV cache reached {100 * usage[1]:.0f}% of its blocks (p50 {100 * usage[0]:.0f}%)"
    if pre:
        title += f"; {pre} requests preempted for want of blocks"
    if inp.engine_waiting_max:
        title += f"; up to {inp.engine_waiting_max} requests waited"
    return Finding(
        "kv-cache-headroom",
        _severity("kv-cache-headroom:usage", usage[1], th, at_least="high" if pre else "low"),
        title,
        {
            "source": "engine",
            "usage_p50": round(usage[0], 4),
            "usage_max": round(usage[1], 4),
            "threshold": th.kv_usage_share,
            "preemptions": pre,
            "waiting_max": inp.engine_waiting_max,
        },  # fmt: skip
        (),
        "give the cache more blocks (vLLM: a higher --gpu-memory-utilization, or a smaller "
        "--max-model-len), admit fewer sequences at once (--max-num-seqs, --max-num-batched-tokens), "
        "or spread the load over more replicas; preempted requests compute their tokens again",
    )


def _size(n: float) -> str:
    if abs(n) >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    if abs(n) >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 1024:.1f} KiB"


def _duration(s: float) -> str:
    if s >= 5400:
        return f"{s / 3600:.1f} h"
    if s >= 90:
        return f"{s / 60:.0f} min"
    return f"{s:.0f} s"


def _growing_where(g: Growing) -> str:
    """``__main__.kept (a list, +20.0 items/s)``, ``__main__.Request (+15.0 objects/s)``."""
    if g.what == "container":
        return f"{g.name or 'an unnamed ' + g.type} (a {g.type}, +{g.count_per_s:.1f} items/s)"
    return f"{g.type} (+{g.count_per_s:.1f} objects/s)"


def steady_growth(p: ProcessMemory, th: FindingThresholds) -> bool:
    """The process's RSS rises along a line past warm-up (R², long enough, by enough) and
    still rises at its end: neither warm-up, noise, nor a cache that filled and stays flat."""
    rate, r2, span, recent = p.growth_bytes_per_s, p.growth_r2, p.growth_s, p.growth_recent_bytes_per_s
    if rate is None or r2 is None or span is None or recent is None or rate <= 0:
        return False
    return (
        span >= th.memory_growth_min_s
        and rate * span >= th.memory_growth_min_bytes
        and r2 >= th.memory_growth_r2
        and recent >= th.memory_growth_recent_share * rate
    )


@rule("memory-growth")
def memory_growth(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    """A process's host memory grows steadily past warm-up: a leak, or a cache without a
    bound. The fastest-growing such process; the others are named in the evidence."""
    growing = sorted(
        (p for p in inp.host_memory if steady_growth(p, th)),
        key=lambda p: -(p.growth_bytes_per_s or 0.0),
    )
    if not growing:
        return None
    p = growing[0]
    rate, span = p.growth_bytes_per_s or 0.0, p.growth_s or 0.0
    recent = p.growth_recent_bytes_per_s or 0.0
    to_limit = p.headroom / rate if p.headroom is not None else None
    per_h = rate * 3600
    # high by the rate, or where the cgroup's limit is near at it, or its OOM killer struck
    near = to_limit is not None and _severity("memory-growth:limit", to_limit, th) == "high"
    sev = _severity("memory-growth", per_h, th, at_least="high" if near or p.oom_kills_during else "low")
    who = f"pid {p.pid}'s" if inp.host_memory_pids else "the process's"
    title = (
        f"{who} memory (RSS) grows {_size(rate)}/s ({_size(per_h)}/h) steadily for "
        f"{span:.0f} s past warm-up (R² {p.growth_r2 or 0.0:.2f})"
    )
    if p.growth_per_call_bytes is not None and p.growth_call_kind is not None:
        title += f", {_size(p.growth_per_call_bytes)} per {p.growth_call_kind}"
    if to_limit is not None:
        title += f"; its memory cgroup's limit is {_duration(max(0.0, to_limit))} away at this rate"
    if p.growing:
        g = p.growing[0]
        title += f"; growing: {_growing_where(g)}"
    warmup = (p.growth_t0 or p.t_first) - p.t_first
    return Finding(
        "memory-growth",
        sev,
        title,
        {
            "pid": p.pid,
            "growth_bytes_per_s": round(rate, 1),
            "over_s": round(span, 1),
            "r2": round(p.growth_r2 or 0.0, 4),
            "recent_bytes_per_s": round(recent, 1),
            "recent_share": round(recent / rate, 3),
            "warmup_s": round(warmup, 1),
            "grown_bytes": int(rate * span),
            "rss_bytes": p.rss_last,
            "per_call_bytes": None if p.growth_per_call_bytes is None else round(p.growth_per_call_bytes, 1),
            "calls": p.growth_calls,
            "call": p.growth_call_kind,
            "limit_bytes": p.cgroup.limit if p.cgroup is not None else None,
            "headroom_bytes": p.headroom,
            "to_limit_s": None if to_limit is None else round(max(0.0, to_limit), 1),
            "oom_kills": p.oom_kills_during,
            "also_growing": [q.pid for q in growing[1:]],
            "growing": [
                {"what": g.what, "type": g.type, "name": g.name, "count": g.count_last,
                 "count_per_s": round(g.count_per_s, 2),
                 "bytes_per_s": None if g.bytes_per_s is None else round(g.bytes_per_s, 1)}
                for g in p.growing
            ],
        },  # fmt: skip
        tuple(_growing_where(g) for g in p.growing),
        "something keeps memory per request or per call: look for caches without a bound "
        "(functools.lru_cache(maxsize=None), dicts keyed by request or prompt), lists that "
        "collect outputs, logs or tensors, and tensors kept with their autograd graph (run "
        "inference under torch.inference_mode()); bound them, and compare two "
        "tracemalloc.take_snapshot()s a minute apart to find the growing line",
        pid=p.pid if inp.host_memory_pids else None,
    )


#: memory-pressure: a stage's slow calls under memory pressure count where the typical calls
#: were under it this many times less (pressure that every call sees explains none of them),
#: with at least this many slow calls
PRESSURE_OVER_TYPICAL = 2.0
PRESSURE_MIN_SLOW_CALLS = 3


@rule("memory-pressure")
def host_memory_pressure(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    """A process's memory cgroup close to its limit, or a stage's slow calls that coincide
    with the process taking major page faults (swap-ins among them) or its cgroup stalling on
    memory: read from /proc and the cgroup outside the target."""
    tight: ProcessMemory | None = None
    tight_share = 0.0
    for p in inp.host_memory:
        cg = p.cgroup
        if cg is None or cg.limit is None or cg.usage is None or cg.limit <= 0:
            continue
        share = cg.usage / cg.limit
        if share >= th.memory_pressure_limit_share and share > tight_share:
            tight, tight_share = p, share
    slow = [
        (stage, n, s, typ)
        for stage, n, s, typ in inp.memory_tails
        if n >= PRESSURE_MIN_SLOW_CALLS
        and s >= th.memory_pressure_slow_share
        and (typ is None or s >= PRESSURE_OVER_TYPICAL * typ)
    ]
    slow.sort(key=lambda x: -x[2])
    if tight is None and not slow:
        return None
    faults = max((p.major_faults_per_s or 0.0 for p in inp.host_memory), default=0.0)
    swap = max((p.swap_max or 0 for p in inp.host_memory), default=0)
    kills = sum(p.oom_kills_during or 0 for p in inp.host_memory)
    parts = []
    evidence: dict[str, object] = {}
    if tight is not None and tight.cgroup is not None:
        cg = tight.cgroup
        assert cg.limit is not None and cg.usage is not None
        parts.append(
            f"the memory cgroup {cg.path} is at {100 * tight_share:.0f}% of its "
            f"{_size(cg.limit)} limit ({_size(max(0, cg.limit - cg.usage))} left)"
        )
        evidence.update(
            {
                "pid": tight.pid,
                "cgroup": cg.path,
                "usage_share": round(tight_share, 4),
                "threshold": th.memory_pressure_limit_share,
                "usage_bytes": cg.usage,
                "limit_bytes": cg.limit,
                "headroom_bytes": max(0, cg.limit - cg.usage),
            }
        )
    if slow:
        stage, n, s, typ = slow[0]
        parts.append(
            f"{stage}'s {n} slow calls spent {100 * s:.0f}% of their time while the process "
            "took major page faults or stalled on memory"
            + (f" (typical calls {100 * typ:.0f}%)" if typ is not None else "")
        )
        evidence["slow_calls"] = [
            {"stage": st, "slow_calls": k, "slow_share": round(x, 4),
             "typical_share": None if y is None else round(y, 4)}
            for st, k, x, y in slow
        ]  # fmt: skip
    if kills:
        parts.append(f"{kills} OOM kills in the cgroup")
    evidence.update(
        {"major_faults_per_s": round(faults, 2), "swap_bytes": swap or None, "oom_kills": kills or None}
    )
    who = tight if tight is not None else None
    # the cgroup's usage in its bands (0.0: no cgroup near its limit); high with OOM kills,
    # medium at least with slow calls under pressure
    sev = _severity("memory-pressure", tight_share, th, at_least="high" if kills else "medium" if slow else "low")
    return Finding(
        "memory-pressure",
        sev,
        "; ".join(parts),
        evidence,
        tuple(f"stage {st}" for st, *_ in slow[:5]),
        "the process is short of memory: raise the container's memory limit or use less (fewer "
        "workers or replicas per container, a smaller batch or cache, weights memory-mapped "
        "and shared between workers); where slow calls coincide with major faults its pages "
        "were reclaimed or swapped out: keep the working set resident (more memory, no swap "
        "for latency-bound services, no memory-hungry neighbours in the cgroup)",
        pid=who.pid if who is not None and inp.host_memory_pids else None,
    )
