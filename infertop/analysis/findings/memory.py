"""The memory rules: the device's memory near its end, the allocator's slack, and the KV cache's
headroom (docs/findings.md). Registered in ``rules.RULES`` after the rules of ``rules.py``
(the package imports this module)."""

from __future__ import annotations

from infertop.analysis.findings.rules import FindingInput, _severity, rule
from infertop.config import FindingThresholds
from infertop.model.findings import Finding


@rule("gpu-memory-pressure")
def memory_pressure(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    m = inp.memory
    if m is None:
        return None
    ratio = m.reserved / m.total if m.reserved is not None and m.total else 0.0
    if ratio < th.memory_pressure_reserved and m.alloc_retries == 0 and m.ooms == 0:
        return None
    sev = (
        "high"
        if m.ooms or ratio >= 0.97
        else "medium"
        if m.alloc_retries or ratio >= 0.93
        else "low"
    )
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
    return Finding(
        "allocator-fragmentation",
        _severity(share, 0.45, 0.6),
        f"{slack / 2**30:.1f} GiB reserved but not allocated ({100 * share:.0f}% of reserved)",
        {
            "reserved": m.reserved,
            "allocated": m.allocated,
            "slack_share": round(share, 4),
            "device_total": m.total,
        },  # fmt: skip
        (),
        "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, keep tensor shapes stable "
        "(pad to buckets), and avoid torch.cuda.empty_cache() churn",
    )


@rule("kv-cache-headroom")
def kv_cache_headroom(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    """The largest batch seen at the longest sequence seen would hold more KV cache than the
    device memory left: one such batch away from an out-of-memory error."""
    g = inp.generation
    if g is None or g.kv_cache is None:
        return None
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
    sev = "high" if need > kv.headroom_bytes or (m is not None and m.ooms) else "medium"
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
