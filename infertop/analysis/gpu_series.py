"""NVML readings as views and evidence: the GPU panel's series, the report's summary, findings.

Pure functions over a session's ``GpuReading``s (oldest first). The panel's series are bucketed
on the stage history's own windows, so a column of GPU utilisation sits under the column of
stage shares for the same second. The target's devices (those it holds memory on) come first.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from infertop.model.events import AllocatorReading, CollectorStatus
from infertop.model.gpu import GpuDeviceReading, GpuReading

#: the metrics the panel draws over time, with how each is read off a device reading
SERIES = ("util_gpu", "util_memory", "dram_bw_util", "pcie_kbs", "nvlink_kbs")


def _metric(d: GpuDeviceReading, name: str) -> float | None:
    if name == "pcie_kbs":
        parts = [x for x in (d.pcie_tx_kbs, d.pcie_rx_kbs) if x is not None]
    elif name == "nvlink_kbs":
        parts = [x for x in (d.nvlink_tx_kbs, d.nvlink_rx_kbs) if x is not None]
    else:
        value = getattr(d, name)
        return None if value is None else float(value)
    return sum(parts) if parts else None


@dataclass(frozen=True)
class GpuSeries:
    """One device's metrics per history bucket (mean of the readings in it; None: no reading)."""

    index: int
    values: dict[str, tuple[float | None, ...]]


@dataclass(frozen=True)
class GpuView:
    """What the GPU panel draws at a moment (and the readings behind it, for report/findings)."""

    devices: tuple[GpuDeviceReading, ...]  # the newest reading, the target's devices first
    series: tuple[GpuSeries, ...]  # same order as devices
    session_means: tuple[dict[str, float | None], ...]  # same order: each metric's session mean
    readings: tuple[GpuReading, ...]  # every reading up to the moment, oldest first
    interval_s: float | None  # median time between readings
    #: py-spy windows in which the target worked (samples outside idle and queue); None: no
    #: windows at all (then every reading counts as "while the target works")
    working: tuple[tuple[float, float], ...] | None = None

    def device(self, index: int) -> GpuDeviceReading | None:
        return next((d for d in self.devices if d.index == index), None)


class GpuAccumulator:
    """Per-device sums of each metric over readings [0, n), extended while n only grows."""

    def __init__(self) -> None:
        self.n = 0
        self.key = 0
        self.sums: dict[tuple[int, str], list[float]] = {}  # (device, metric) -> [sum, count]

    def upto(self, readings: Sequence[GpuReading], key: int) -> dict[tuple[int, str], list[float]]:
        n = len(readings)
        if key != self.key or n < self.n:
            self.n, self.key, self.sums = 0, key, {}
        for r in readings[self.n : n]:
            for d in r.devices:
                for m in SERIES:
                    if (v := _metric(d, m)) is not None:
                        acc = self.sums.setdefault((d.index, m), [0.0, 0])
                        acc[0] += v
                        acc[1] += 1
        self.n = n
        return self.sums


def target_devices(readings: Sequence[GpuReading]) -> tuple[int, ...] | None:
    """Devices the target held memory on in any reading; None when NVML never said whose
    memory is whose (no permission for the process list)."""
    known = False
    used: set[int] = set()
    for r in readings:
        for d in r.devices:
            if d.process_memory is not None:
                known = True
                if d.process_memory > 0:
                    used.add(d.index)
    return tuple(sorted(used)) if known else None


def device_order(readings: Sequence[GpuReading]) -> tuple[int, ...]:
    """Every device index, the target's first."""
    if not readings:
        return ()
    mine = target_devices(readings) or ()
    rest = sorted({d.index for d in readings[-1].devices} - set(mine))
    return (*mine, *rest)


def _interval(readings: Sequence[GpuReading]) -> float | None:
    steps = [b.t - a.t for a, b in zip(readings[-50:], readings[-49:]) if b.t > a.t]
    return statistics.median(steps) if steps else None


def buckets_for(windows: Sequence[tuple[float, float]], t: float, n: int) -> list[tuple[float, float]]:
    """Time buckets: the stage history's windows (each from the previous one's end), or, with
    no windows, one-second buckets ending at ``t``."""
    if not windows:
        return [(t - n + i, t - n + i + 1) for i in range(n)]
    out = [(windows[0][0], windows[0][1])]
    for (_s, prev_end), (start, end) in zip(windows, windows[1:]):
        out.append((min(prev_end, start), end))
    return out


def _bucketed(readings: Sequence[GpuReading], buckets: list[tuple[float, float]], index: int) -> GpuSeries:
    values: dict[str, list[float | None]] = {m: [] for m in SERIES}
    for t0, t1 in buckets:
        lo = bisect.bisect_left(readings, t0, key=_t)
        hi = bisect.bisect_right(readings, t1, lo=lo, key=_t)
        devs = [d for r in readings[lo:hi] for d in r.devices if d.index == index]
        for m in SERIES:
            xs = [v for d in devs if (v := _metric(d, m)) is not None]
            values[m].append(sum(xs) / len(xs) if xs else None)
    return GpuSeries(index, {m: tuple(v) for m, v in values.items()})


def _t(r: GpuReading) -> float:
    return r.t


def gpu_view(
    readings: Sequence[GpuReading],
    windows: Sequence[tuple[float, float]],
    t: float,
    history: int,
    accumulator: GpuAccumulator | None = None,
    key: int = 0,
    working: Sequence[tuple[float, float]] | None = None,
) -> GpuView | None:
    """The panel's picture from the readings up to ``t``; None when there are none.
    ``accumulator`` and ``key`` (which session) make the session means incremental."""
    if not readings:
        return None
    order = device_order(readings[-1:])  # by the newest reading: where the target is now
    latest = {d.index: d for d in readings[-1].devices}
    order = tuple(i for i in order if i in latest)
    buckets = buckets_for(windows, t, history)
    sums = (accumulator or GpuAccumulator()).upto(readings, key)
    means = tuple(
        {m: (a[0] / a[1] if (a := sums.get((i, m))) else None) for m in SERIES} for i in order
    )
    return GpuView(
        devices=tuple(latest[i] for i in order),
        series=tuple(_bucketed(readings, buckets, i) for i in order),
        session_means=means,
        readings=tuple(readings),
        interval_s=_interval(readings),
        working=None if working is None else tuple(working),
    )


def nvml_reason(statuses: Sequence[CollectorStatus]) -> str:
    """The one line the GPU panel shows when there are no readings."""
    st = next((s for s in statuses if s.collector == "nvml"), None)
    if st is None:
        return "no GPU readings in this session"
    if st.state == "unavailable":
        return st.message or "no GPU"
    if st.state == "failed":
        return f"NVML failed: {st.message}"
    return "waiting for the first GPU reading…"


# -- the report ---------------------------------------------------------------------------------
def _stats(xs: list[float], nd: int = 2) -> dict[str, float] | None:
    if not xs:
        return None
    s = sorted(xs)

    def pct(p: float) -> float:
        return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]

    return {"mean": round(sum(s) / len(s), nd), "p50": round(pct(0.5), nd),
            "p95": round(pct(0.95), nd), "max": round(s[-1], nd)}  # fmt: skip


def utilization_summary(readings: Sequence[GpuReading]) -> list[dict[str, object]]:
    """Per device (the target's first): how busy it was over the readings (report schema)."""
    mine = set(target_devices(readings) or ())
    out = []
    for i in device_order(readings):
        devs = [d for r in readings for d in r.devices if d.index == i]
        last = devs[-1]

        def col(name: str) -> list[float]:
            return [v for d in devs if (v := getattr(d, name)) is not None]

        throttled: dict[str, int] = {}
        known = 0
        for d in devs:
            if d.throttle is not None:
                known += 1
                for reason in d.throttle:
                    throttled[reason] = throttled.get(reason, 0) + 1
        out.append({
            "index": i, "name": last.name, "uuid": last.uuid, "target": i in mine,
            "readings": len(devs),
            "util_gpu": _stats(col("util_gpu")), "util_memory": _stats(col("util_memory")),
            "dram_bw_util": _stats(col("dram_bw_util")), "sm_util": _stats(col("sm_util")),
            "tensor_util": _stats(col("tensor_util")),
            "pcie_tx_kbs": _stats(col("pcie_tx_kbs"), 1), "pcie_rx_kbs": _stats(col("pcie_rx_kbs"), 1),
            "nvlink_tx_kbs": _stats(col("nvlink_tx_kbs"), 1),
            "nvlink_rx_kbs": _stats(col("nvlink_rx_kbs"), 1),
            "sm_clock_mhz": _stats(col("sm_clock_mhz"), 0), "power_w": _stats(col("power_w"), 1),
            "temperature_c": _stats(col("temperature_c"), 0),
            "throttle": {k: round(v / known, 4) for k, v in sorted(throttled.items())} if known else None,
        })  # fmt: skip
    return out


def allocator_device(
    allocator: AllocatorReading | None, devices: Sequence[GpuDeviceReading], mine: Sequence[int] | None
) -> GpuDeviceReading | None:
    """The NVML device the allocator's (torch, CUDA_VISIBLE_DEVICES-relative) index is on:
    the target's n-th device, or its only one, else the device with the same index."""
    if allocator is None:
        return None
    by_index = {d.index: d for d in devices}
    mine = tuple(mine or ())
    if len(mine) == 1:
        return by_index.get(mine[0])
    if allocator.device < len(mine):
        return by_index.get(mine[allocator.device])
    return by_index.get(allocator.device)


def memory_summary(
    readings: Sequence[GpuReading], allocator: AllocatorReading | None
) -> dict[str, object] | None:
    """``gpu.memory`` of the report: the allocator's numbers and NVML's for the same device."""
    mine = target_devices(readings)
    devices = readings[-1].devices if readings else ()
    dev = allocator_device(allocator, devices, mine)
    if dev is None and readings:  # no allocator: the target's busiest device, else device 0
        ranked = [d for d in devices if mine is None or d.index in mine] or list(devices)
        dev = max(ranked, key=lambda d: d.process_memory or 0) if ranked else None
    if allocator is None and dev is None:
        return None
    a = allocator
    used, total, proc = (dev.memory_used, dev.memory_total, dev.process_memory) if dev else (None,) * 3
    return {
        "device": a.device if a else None,
        "allocated": a.allocated if a else None,
        "reserved": a.reserved if a else None,
        "peak_allocated": a.peak_allocated if a else None,
        "alloc_retries": a.alloc_retries if a else None,
        "ooms": a.ooms if a else None,
        "nvml_device": dev.index if dev else None,
        "total": total,
        "used": used,
        "process": proc,
        "others": None if used is None or proc is None else max(0, used - proc),
        "free": None if used is None or total is None else max(0, total - used),
    }


# -- findings -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NvmlBusy:
    """NVML's view of how busy the target's GPUs were while the target was active."""

    busy_share: float  # mean utilization.gpu / 100 over the readings
    seconds: float  # time the readings cover
    readings: int
    devices: tuple[int, ...]
    gaps_s: tuple[float, ...]  # runs of 0 % readings (seconds each), longest first


def nvml_busy(
    readings: Sequence[GpuReading], active: Sequence[tuple[float, float]] | None
) -> NvmlBusy | None:
    """Busy share of the target's devices over the readings taken while the target was
    active (inside a py-spy window with work in it; every reading when there are no windows).
    None when the target holds no GPU memory or NVML gave no utilisation."""
    mine = target_devices(readings)
    if mine is not None and not mine:
        return None  # NVML says the target holds no GPU memory: not a GPU workload
    if active is not None:
        starts = [a for a, _ in active]
        keep = []
        for r in readings:
            i = bisect.bisect_right(starts, r.t) - 1
            if i >= 0 and r.t <= active[i][1]:
                keep.append(r)
        readings = keep
    step = _interval(readings) or 0.5
    devices = set(mine) if mine is not None else None
    utils: list[float] = []
    gaps: list[float] = []
    seen: set[int] = set()
    seconds = 0.0
    prev: dict[int, float] = {}  # device -> time of its previous reading
    run: dict[int, float] = {}  # device -> length of its current run of 0 % readings
    for r in readings:  # one pass: this runs with every live snapshot's findings
        for d in r.devices:
            if d.util_gpu is None or (devices is not None and d.index not in devices):
                continue
            last = prev.get(d.index)
            dt = min(step * 2, r.t - last) if last is not None and r.t > last else step
            prev[d.index] = r.t
            seen.add(d.index)
            utils.append(d.util_gpu / 100.0)
            seconds += dt
            if d.util_gpu <= 0:
                run[d.index] = run.get(d.index, 0.0) + dt
            elif run.get(d.index):
                gaps.append(run.pop(d.index))
    gaps += [x for x in run.values() if x]
    if not utils:
        return None
    return NvmlBusy(
        busy_share=sum(utils) / len(utils),
        seconds=seconds,
        readings=len(utils),
        devices=tuple(sorted(seen)),
        gaps_s=tuple(sorted(gaps, reverse=True)),
    )
