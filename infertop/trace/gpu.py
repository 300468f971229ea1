"""The GPU side of a trace: kernel time by kind, busy share and idle gaps, copies, syncs, launches.

Pure functions over a ``KinetoTrace`` (columns), vectorised with numpy. Definitions follow the
spec: kernel time by kind is a plain sum of durations (NCCL kernels are communication,
memcpy/memset are memory, everything else compute); busy share is the union of all GPU
activity per device over the span from its first to its last GPU event.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from infertop.agent.payload.events import is_blocking_call
from infertop.agent.payload.events import memcpy_kind as agent_memcpy_kind
from infertop.model.events import SyncStat
from infertop.model.rows import MemcpyRow
from infertop.trace.table import CAT, GPU_CATS, KinetoTrace, distinct


@dataclass(frozen=True)
class Gap:
    device: int
    start_us: float
    dur_us: float


@dataclass(frozen=True)
class GpuSummary:
    kernel_time_us: dict[str, float]  # compute / memory / communication
    busy_us: float
    span_us: float
    gaps: tuple[Gap, ...]  # idle gaps over the threshold, longest first
    memcpy: tuple[MemcpyRow, ...]
    sync_events: int  # cuda_sync events (Kineto's own sync category)
    #: device syncs by name, most time first: the blocking runtime and driver calls and the
    #: cuda_sync events, as the agent counts them (``is_blocking_call``), so a trace's report
    #: and its import's report have the same rows
    syncs: tuple[SyncStat, ...]
    launch_delay_us: tuple[float, float] | None  # (median, p95) kernel start − launch start

    @property
    def busy_share(self) -> float | None:
        return self.busy_us / self.span_us if self.span_us > 0 else None


def quantile(values: np.ndarray, q: float) -> float:
    """The q-quantile (0..1), linearly interpolated as ``np.percentile`` does by default,
    without its first-call import of ``numpy.ma`` (~15 ms of a report's start-up)."""
    s = np.sort(np.asarray(values, dtype=np.float64))
    if not len(s):
        return 0.0
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return float(s[lo] + (s[hi] - s[lo]) * (pos - lo))


def memcpy_kind(name: str) -> tuple[str, str]:
    """(direction, host memory kind) from a Kineto memcpy/memset name, as the agent classifies
    its copies (one classification for live windows, imported traces and trace reports);
    ("unknown", "unknown") for a name that is neither."""
    kind, host = agent_memcpy_kind(name)
    return (kind or "unknown", host or "unknown")


def _is_nccl(trace: KinetoTrace) -> np.ndarray:
    flags = np.array([n.lower().startswith("nccl") for n in trace.names], dtype=bool)
    return flags[trace.name] if len(trace.names) else np.zeros(len(trace), dtype=bool)


def kernel_time_by_kind(trace: KinetoTrace) -> dict[str, float]:
    kernel = trace.cat == CAT["kernel"]
    nccl = _is_nccl(trace)
    memory = trace.of("gpu_memcpy", "gpu_memset")
    return {
        "compute": float(trace.dur[kernel & ~nccl].sum()),
        "memory": float(trace.dur[memory].sum()),
        "communication": float(trace.dur[kernel & nccl].sum()),
    }


def memcpy_table(trace: KinetoTrace) -> list[MemcpyRow]:
    mask = trace.of("gpu_memcpy", "gpu_memset")
    rows: dict[tuple[str, str], list[float]] = {}
    kinds: dict[int, tuple[str, str]] = {}
    for nid, nbytes, dur in zip(trace.name[mask], trace.nbytes[mask], trace.dur[mask]):
        key = kinds.get(nid)
        if key is None:
            key = kinds[nid] = memcpy_kind(trace.names[nid])
        acc = rows.setdefault(key, [0, 0, 0.0])
        acc[0] += 1
        acc[1] += max(0, int(nbytes))
        acc[2] += float(dur)
    return sorted(
        (MemcpyRow(k, h, int(c), int(b), t) for (k, h), (c, b, t) in rows.items()),
        key=lambda r: -r.total_us,
    )


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Total covered length of intervals, and the gaps between merged intervals."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    block_start = s[idx]
    block_end = np.maximum.reduceat(e, idx)
    covered = float((block_end - block_start).sum())
    gap_start = block_end[:-1]
    gap_len = block_start[1:] - block_end[:-1]
    return covered, gap_start, gap_len


def busy_and_gaps(trace: KinetoTrace, min_gap_us: float = 100_000.0) -> tuple[float, float, list[Gap]]:
    """GPU busy time and span summed over devices, and idle gaps ≥ ``min_gap_us``."""
    gpu = np.isin(trace.cat, GPU_CATS)
    busy = span = 0.0
    gaps: list[Gap] = []
    for dev in distinct(trace.pid[gpu]):
        m = gpu & (trace.pid == dev)
        starts, ends = trace.ts[m], trace.ts[m] + trace.dur[m]
        covered, gstart, glen = _union(starts, ends)
        busy += covered
        span += float(ends.max() - starts.min())
        big = glen >= min_gap_us
        gaps += [Gap(int(dev), float(a), float(b)) for a, b in zip(gstart[big], glen[big])]
    gaps.sort(key=lambda g: -g.dur_us)
    return busy, span, gaps


def launch_delays(trace: KinetoTrace) -> np.ndarray:
    """Kernel start minus the start of the runtime call that launched it (by correlation id)."""
    kern = trace.of("kernel", "gpu_memcpy", "gpu_memset") & (trace.correlation >= 0)
    rt = trace.of("cuda_runtime", "cuda_driver") & (trace.correlation >= 0)
    if not kern.any() or not rt.any():
        return np.empty(0)
    rt_corr, rt_ts = trace.correlation[rt], trace.ts[rt]
    order = np.argsort(rt_corr)
    rt_corr, rt_ts = rt_corr[order], rt_ts[order]
    k_corr, k_ts = trace.correlation[kern], trace.ts[kern]
    pos = np.searchsorted(rt_corr, k_corr)
    pos = np.clip(pos, 0, len(rt_corr) - 1)
    hit = rt_corr[pos] == k_corr
    return k_ts[hit] - rt_ts[pos[hit]]


def blocking_calls(trace: KinetoTrace) -> np.ndarray:
    """The mask of the runtime and driver calls that block the host until the device catches
    up (the agent's ``is_blocking_call``)."""
    ids = [i for i, n in enumerate(trace.names) if is_blocking_call(n)]
    return trace.of("cuda_runtime", "cuda_driver") & np.isin(trace.name, ids)


def sync_table(trace: KinetoTrace) -> tuple[SyncStat, ...]:
    """Device syncs by name: blocking calls and cuda_sync events, (count, µs), most time first."""
    mask = blocking_calls(trace) | (trace.cat == CAT["cuda_sync"])
    acc: dict[str, list[float]] = {}
    for nid, dur in zip(trace.name[mask].tolist(), trace.dur[mask].tolist()):
        a = acc.setdefault(trace.names[nid], [0, 0.0])
        a[0] += 1
        a[1] += dur
    rows = (SyncStat(n, int(c), float(t)) for n, (c, t) in acc.items())
    return tuple(sorted(rows, key=lambda y: (-y.total_us, y.name)))


def summarize_gpu(trace: KinetoTrace, min_gap_us: float = 100_000.0) -> GpuSummary:
    busy, span, gaps = busy_and_gaps(trace, min_gap_us) if trace.has_gpu else (0.0, 0.0, [])
    sync = trace.cat == CAT["cuda_sync"]
    delays = launch_delays(trace)
    return GpuSummary(
        kernel_time_us=kernel_time_by_kind(trace),
        busy_us=busy,
        span_us=span,
        gaps=tuple(gaps),
        memcpy=tuple(memcpy_table(trace)),
        sync_events=int(sync.sum()),
        syncs=sync_table(trace),
        launch_delay_us=(quantile(delays, 0.5), quantile(delays, 0.95))
        if len(delays)
        else None,
    )
