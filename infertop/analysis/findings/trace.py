"""Evidence for the findings from a Kineto trace (the columns, summarised once)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from infertop.analysis.findings.rules import FindingInput
from infertop.analysis.trace_ops import enclosing_ops, op_table, time_outside_ops
from infertop.trace.gpu import GpuSummary, blocking_calls, memcpy_kind, summarize_gpu
from infertop.trace.table import CAT, KinetoTrace, distinct


def _launching_ops(trace: KinetoTrace, gpu_mask: np.ndarray) -> list[str]:
    """Names of the CPU ops whose runtime calls launched the masked GPU events, most first."""
    corr = distinct(trace.correlation[gpu_mask & (trace.correlation >= 0)])
    rt = trace.of("cuda_runtime", "cuda_driver") & np.isin(trace.correlation, corr)
    names = [trace.names[trace.name[j]] for j in enclosing_ops(trace, rt) if j is not None]
    return [n for n, _ in Counter(names).most_common()]


def _host_syncs(trace: KinetoTrace) -> tuple[dict[str, tuple[int, float]], tuple[str, ...]]:
    """Blocking runtime calls made from inside a torch op (user code), and their call sites.

    A synchronize outside every op is the profiler's own (at a step boundary or at stop)."""
    rt = blocking_calls(trace)
    calls: dict[str, list[float]] = {}
    sites: Counter[str] = Counter()
    for i, op in zip(np.flatnonzero(rt), enclosing_ops(trace, rt)):
        if op is None:
            continue
        acc = calls.setdefault(trace.names[trace.name[i]], [0, 0.0])
        acc[0] += 1
        acc[1] += float(trace.dur[i])
        sites[trace.names[trace.name[op]]] += 1
    return {k: (int(c), us) for k, (c, us) in calls.items()}, tuple(n for n, _ in sites.most_common())


def trace_input(trace: KinetoTrace, gpu: GpuSummary | None = None) -> FindingInput:
    gpu = gpu or summarize_gpu(trace)
    has_gpu = trace.has_gpu
    start = float(trace.ts.min()) if len(trace) else 0.0
    end = float((trace.ts + trace.dur).max()) if len(trace) else 0.0
    copies = trace.cat == CAT["gpu_memcpy"]
    kinds = {nid: memcpy_kind(trace.names[nid]) for nid in distinct(trace.name[copies])}
    sites: dict[tuple[str, str], tuple[str, ...]] = {}
    for key in set(kinds.values()):
        ids = [n for n, k in kinds.items() if k == key]
        sites[key] = tuple(_launching_ops(trace, copies & np.isin(trace.name, ids)))
    host_syncs, sync_sites = _host_syncs(trace)
    kernels = trace.cat == CAT["kernel"]
    return FindingInput(
        wall_us=end - start,
        ops=tuple(op_table(trace)),
        outside_ops=time_outside_ops(trace),
        gpu=gpu if has_gpu else None,
        kernel_durations_us=trace.dur[kernels] if kernels.any() else None,
        transfer_bytes=trace.nbytes[copies] if copies.any() else None,
        copy_sites=sites,
        host_syncs=host_syncs,
        sync_sites=sync_sites,
    )
