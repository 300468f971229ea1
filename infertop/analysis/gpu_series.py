"""NVML readings as views and evidence: the GPU panel's series, the report's summary, findings.

Pure functions over a session's ``GpuReading``s (oldest first). The panel's series are bucketed
on the stage history's own windows, so a column of GPU utilisation sits under the column of
stage shares for the same second. The target's devices (those it holds memory on) come first.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

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
    #: a bounded live session's readings past its horizon, summed (``readings`` are the rest)
    fold: GpuFold | None = None

    def device(self, index: int) -> GpuDeviceReading | None:
        return next((d for d in self.devices if d.index == index), None)


def _add_sums(sums: dict[tuple[int, str], list[float]], readings: Iterable[GpuReading]) -> None:
    for r in readings:
        for d in r.devices:
            for m in SERIES:
                if (v := _metric(d, m)) is not None:
                    acc = sums.setdefault((d.index, m), [0.0, 0])
                    acc[0] += v
                    acc[1] += 1


class GpuFold:
    """NVML readings a bounded session no longer keeps, summed for what the live views and
    findings read over the whole session: each metric's session mean, which devices the target
    held memory on, and the busy share while the target worked (``nvml_busy``'s running state).
    """

    MAX_GAPS = 32  # the longest idle gaps are kept; the findings quote the longest

    def __init__(self) -> None:
        self.n = 0  # readings folded
        self.sums: dict[tuple[int, str], list[float]] = {}  # (device, metric) -> [sum, count]
        self.known = False  # NVML said whose memory is whose, in some reading
        self.used: set[int] = set()  # devices the target held memory on
        #: device -> [sum of utilization, readings, seconds, previous reading's t, current
        #: run of 0 % readings (s)], over the readings taken while the target worked
        self.busy: dict[int, list[float]] = {}
        self.gaps: list[float] = []  # closed runs of 0 % readings, longest first

    def copy(self) -> GpuFold:
        """A copy that the session's later folds do not change (for a snapshot)."""
        out = GpuFold()
        out.n, out.known, out.used, out.gaps = self.n, self.known, set(self.used), list(self.gaps)
        out.sums = {k: list(v) for k, v in self.sums.items()}
        out.busy = {k: list(v) for k, v in self.busy.items()}
        return out

    def add(self, readings: Sequence[GpuReading], active: Sequence[tuple[float, float]] | None) -> None:
        """Fold ``readings`` (oldest first); ``active``: when the target worked (None: always)."""
        self.n += len(readings)
        _add_sums(self.sums, readings)
        for r in readings:
            for d in r.devices:
                if d.process_memory is not None:
                    self.known = True
                    if d.process_memory > 0:
                        self.used.add(d.index)
        working = _while_active(readings, active)
        gaps: list[float] = []
        _busy_pass(working, _interval(working) or 0.5, self.busy, gaps)
        self.gaps = sorted(self.gaps + gaps, reverse=True)[: self.MAX_GAPS]


class GpuAccumulator:
    """Per-device sums of each metric over readings [0, n), extended while n only grows.

    ``n`` counts from the session's first reading; a bounded session's folded readings are
    read from its ``GpuFold``."""

    def __init__(self) -> None:
        self.n = 0
        self.key = 0
        self.sums: dict[tuple[int, str], list[float]] = {}  # (device, metric) -> [sum, count]

    def upto(
        self, readings: Sequence[GpuReading], key: int, fold: GpuFold | None = None
    ) -> dict[tuple[int, str], list[float]]:
        base = fold.n if fold is not None else 0
        n = base + len(readings)
        if key != self.key or n < self.n or self.n < base:
            self.n, self.key = base, key
            self.sums = {k: list(v) for k, v in fold.sums.items()} if fold is not None else {}
        _add_sums(self.sums, readings[self.n - base :])
        self.n = n
        return self.sums


def target_devices(
    readings: Sequence[GpuReading], fold: GpuFold | None = None
) -> tuple[int, ...] | None:
    """Devices the target held memory on in any reading (folded ones too); None when NVML
    never said whose memory is whose (no permission for the process list)."""
    known = fold is not None and fold.known
    used: set[int] = set(fold.used) if fold is not None else set()
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
    fold: GpuFold | None = None,
    process: int | None = None,
) -> GpuView | None:
    """The panel's picture from the readings up to ``t``; None when there are none.
    ``accumulator`` and ``key`` (which session) make the session means incremental.
    ``process``: one process's view of a many-process session: "this process" is that pid's
    memory (NVML's process list), and its GPUs come first."""
    if not readings:
        return None
    latest = {d.index: d for d in readings[-1].devices}
    if process is not None:
        latest = {i: _own(d, process) for i, d in latest.items()}
    # by the newest reading (as the process sees it): where the target is now
    order = device_order([GpuReading(readings[-1].t, tuple(latest.values()))])
    buckets = buckets_for(windows, t, history)
    sums = (accumulator or GpuAccumulator()).upto(readings, key, fold)
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
        fold=fold.copy() if fold is not None and fold.n else None,
    )


def _own(d: GpuDeviceReading, pid: int) -> GpuDeviceReading:
    """A device as one process sees it: ``process_memory`` is that pid's (unknown stays so)."""
    if d.process_memory is None:
        return d
    return replace(d, process_memory=sum(size for p, size in d.processes if p == pid))


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
    out: list[dict[str, object]] = []
    for i in device_order(readings):
        devs = [d for r in readings for d in r.devices if d.index == i]
        last = devs[-1]

        def col(name: str, devs: list[GpuDeviceReading] = devs) -> list[float]:
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
    the target's n-th device, or its only one, else the device with the same index. An
    allocator reading that names its process (a child's, a merged recording's) counts the
    devices NVML lists that process on, where there are any: in a merged recording the
    devices of its own host, not every host's target's."""
    if allocator is None:
        return None
    by_index = {d.index: d for d in devices}
    own = tuple(d.index for d in devices if allocator.pid and any(p == allocator.pid for p, _ in d.processes))
    mine = own or tuple(mine or ())
    if len(mine) == 1:
        return by_index.get(mine[0])
    if allocator.device < len(mine):
        return by_index.get(mine[allocator.device])
    return by_index.get(allocator.device)


def memory_summary(
    readings: Sequence[GpuReading], allocator: AllocatorReading | None, fold: GpuFold | None = None
) -> dict[str, object] | None:
    """``gpu.memory`` of the report: the allocator's numbers and NVML's for the same device."""
    mine = target_devices(readings, fold)
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


def _while_active(
    readings: Sequence[GpuReading], active: Sequence[tuple[float, float]] | None
) -> Sequence[GpuReading]:
    """The readings taken inside the ``active`` stretches (all of them when None)."""
    if active is None:
        return readings
    starts = [a for a, _ in active]
    keep = []
    for r in readings:
        i = bisect.bisect_right(starts, r.t) - 1
        if i >= 0 and r.t <= active[i][1]:
            keep.append(r)
    return keep


def _busy_pass(
    readings: Iterable[GpuReading], step: float, state: dict[int, list[float]], gaps: list[float]
) -> None:
    """One pass over readings (oldest first), carrying on from ``state`` (device -> [sum of
    utilization, readings, seconds, previous t, current run of 0 %]); closed gaps appended."""
    for r in readings:  # one pass: this runs with every live snapshot's findings
        for d in r.devices:
            if d.util_gpu is None:
                continue
            st = state.get(d.index)
            if st is None:
                st = state[d.index] = [0.0, 0, 0.0, -math.inf, 0.0]
            last = st[3]
            dt = min(step * 2, r.t - last) if r.t > last > -math.inf else step
            st[3] = r.t
            st[0] += d.util_gpu / 100.0
            st[1] += 1
            st[2] += dt
            if d.util_gpu <= 0:
                st[4] += dt
            elif st[4]:
                gaps.append(st[4])
                st[4] = 0.0


def nvml_busy(
    readings: Sequence[GpuReading],
    active: Sequence[tuple[float, float]] | None,
    fold: GpuFold | None = None,
) -> NvmlBusy | None:
    """Busy share of the target's devices over the readings taken while the target was
    active (inside a py-spy window with work in it; every reading when there are no windows),
    a bounded session's folded readings included. None when the target holds no GPU memory or
    NVML gave no utilisation."""
    mine = target_devices(readings, fold)
    if mine is not None and not mine:
        return None  # NVML says the target holds no GPU memory: not a GPU workload
    kept = _while_active(readings, active)
    step = _interval(kept) or 0.5
    state = {i: list(st) for i, st in fold.busy.items()} if fold is not None else {}
    gaps: list[float] = list(fold.gaps) if fold is not None else []
    _busy_pass(kept, step, state, gaps)
    devices = set(mine) if mine is not None else None
    chosen = {i: st for i, st in state.items() if st[1] and (devices is None or i in devices)}
    if not chosen:
        return None
    gaps += [st[4] for st in chosen.values() if st[4]]
    n = sum(int(st[1]) for st in chosen.values())
    return NvmlBusy(
        busy_share=sum(st[0] for st in chosen.values()) / n,
        seconds=sum(st[2] for st in chosen.values()),
        readings=n,
        devices=tuple(sorted(chosen)),
        gaps_s=tuple(sorted(gaps, reverse=True)),
    )
