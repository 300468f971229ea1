"""NVML: device memory, utilisation, bandwidth, clocks, power and the target's own memory.

Every NVML call goes through one chokepoint (``NvmlReader._get``) that turns any error into
None and remembers why, so nothing above this module ever sees an NVML exception. One read
of every device per tick; readings are immutable ``GpuReading``s. The ``lib`` argument is
the ``pynvml`` module in production and a recorded-readings stand-in in tests (no GPU here).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from infertop import procfs
from infertop.collect.base import drain
from infertop.collect.tree import descendants
from infertop.model.events import CollectorStatus
from infertop.model.gpu import GpuDeviceReading, GpuReading

THROTTLE_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)


class _NotAvailable:
    """What the chokepoint returns for a failed NVML call (distinct from a call returning None)."""

    def __repr__(self) -> str:
        return "NA"


NA: Any = _NotAvailable()


def _load_pynvml() -> Any:
    import pynvml

    return pynvml


def nvml_reason(exc: BaseException) -> str:
    """A plain sentence for an NVML failure."""
    name = type(exc).__name__
    text = str(exc) or name
    if "LibraryNotFound" in name or "Library Not Found" in text:
        return "NVML library not found (no NVIDIA driver on this host)"
    if "DriverNotLoaded" in name or "Driver Not Loaded" in text:
        return "NVIDIA driver not loaded"
    if "NoPermission" in name or "Insufficient Permissions" in text:
        return "no permission to query NVML"
    if "LibRmVersionMismatch" in name or "Mismatch" in text:
        return "NVML library and driver versions do not match (reboot or reinstall the driver)"
    if "FunctionNotFound" in name:
        return "this driver's NVML lacks the function (driver older than the bindings)"
    if "NotSupported" in name or "Not Supported" in text:
        return "not supported on this GPU"
    if isinstance(exc, ImportError):
        return f"no NVML bindings ({exc})"
    if isinstance(exc, AttributeError):
        return f"the installed nvidia-ml-py is too old for this metric ({exc})"
    return text


def target_pids(pid: int) -> set[int]:
    """The target's pid in every pid namespace we can see (NVML reports host pids)."""
    pids = {pid}
    try:
        pids.update(procfs.ns_pids(pid))
    except (OSError, ValueError):
        pass
    return pids


class NvmlReader:
    """Reads all devices once per call to ``read``. Construct, then check ``available``."""

    def __init__(self, target_pid: int | None = None, lib: Any = None) -> None:
        self.unavailable: dict[str, str] = {}  # metric -> why it is missing
        self.reason: str | None = None  # why nothing at all is available
        self.target = target_pids(target_pid) if target_pid else set()
        try:
            self.lib = lib if lib is not None else _load_pynvml()
            self.lib.nvmlInit()
            count = self.lib.nvmlDeviceGetCount()
            self.handles = [self.lib.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # noqa: BLE001 - the chokepoint for initialisation
            self.reason = f"no GPU: {nvml_reason(exc)}"
            self.handles = []
            return
        if not self.handles:
            self.reason = "no GPU: NVML sees 0 devices"
        self._gpm: dict[int, Any] = {}  # device index -> previous GPM sample
        self._closed = False

    @property
    def available(self) -> bool:
        return self.reason is None

    def status(self, interval: float) -> CollectorStatus:
        """'running' with what is missing, or 'unavailable' with why."""
        if not self.available:
            return CollectorStatus(time.time(), "nvml", "unavailable", self.reason or "")
        missing = "; ".join(f"{k}: {v}" for k, v in sorted(self.unavailable.items()))
        text = f"{len(self.handles)} GPU(s), every {interval:g} s"
        return CollectorStatus(time.time(), "nvml", "running", text + (f" ({missing})" if missing else ""))

    def _get(self, metric: str, fn: str, *args: Any) -> Any:
        """The chokepoint: NVML's value, or ``NA`` (and the reason remembered once).

        A metric that failed once is not asked again (NVML errors are not transient enough
        to pay for them every tick), except the process list, whose permission can change.
        """
        if metric in self.unavailable and metric != "processes":
            return NA
        try:
            return getattr(self.lib, fn)(*args)
        except Exception as exc:  # noqa: BLE001 - every NVML error becomes "not available"
            self.unavailable.setdefault(metric, nvml_reason(exc))
            return NA

    def _value(self, metric: str, fn: str, *args: Any) -> float | None:
        v = self._get(metric, fn, *args)
        return None if v is NA or v is None else float(v)

    def read(self) -> GpuReading:
        return GpuReading(time.time(), tuple(self._device(i, h) for i, h in enumerate(self.handles)))

    def _device(self, index: int, h: Any) -> GpuDeviceReading:
        lib, g, v = self.lib, self._get, self._value
        mem = g("memory", "nvmlDeviceGetMemoryInfo", h)
        util = g("utilization", "nvmlDeviceGetUtilizationRates", h)
        procs = g("processes", "nvmlDeviceGetComputeRunningProcesses", h)
        rows = () if procs is NA else tuple(
            (int(p.pid), int(p.usedGpuMemory or 0)) for p in procs or () if getattr(p, "pid", None)
        )
        throttle = g("throttle", "nvmlDeviceGetCurrentClocksEventReasons", h)
        power = v("power", "nvmlDeviceGetPowerUsage", h)
        gpm = self._guard("gpm", self._gpm_metrics, index, h) or {}
        tx, rx = self._guard("nvlink", self._nvlink, h) or (None, None)
        return GpuDeviceReading(
            index=index,
            name=_text(g("name", "nvmlDeviceGetName", h)),
            uuid=_text(g("uuid", "nvmlDeviceGetUUID", h)),
            memory_used=None if mem is NA else int(mem.used),
            memory_total=None if mem is NA else int(mem.total),
            process_memory=None
            if procs is NA
            else sum(b for pid, b in rows if pid in self.target),
            util_gpu=None if util is NA else float(util.gpu),
            util_memory=None if util is NA else float(util.memory),
            pcie_tx_kbs=v("pcie", "nvmlDeviceGetPcieThroughput", h, lib.NVML_PCIE_UTIL_TX_BYTES),
            pcie_rx_kbs=v("pcie", "nvmlDeviceGetPcieThroughput", h, lib.NVML_PCIE_UTIL_RX_BYTES),
            nvlink_tx_kbs=tx,
            nvlink_rx_kbs=rx,
            sm_clock_mhz=v("clocks", "nvmlDeviceGetClockInfo", h, lib.NVML_CLOCK_SM),
            mem_clock_mhz=v("clocks", "nvmlDeviceGetClockInfo", h, lib.NVML_CLOCK_MEM),
            power_w=None if power is None else power / 1000.0,  # NVML reports mW
            temperature_c=v("temperature", "nvmlDeviceGetTemperature", h, lib.NVML_TEMPERATURE_GPU),
            throttle=None
            if throttle is NA
            else tuple(n for bit, n in THROTTLE_REASONS if int(throttle) & bit),
            dram_bw_util=gpm.get("dram_bw_util"),
            sm_util=gpm.get("sm_util"),
            tensor_util=gpm.get("tensor_util"),
            processes=rows,
        )

    def _guard(self, metric: str, fn: Any, *args: Any) -> Any:
        """Run a multi-call reader; bindings that lack a constant or struct it needs (older
        nvidia-ml-py) make the metric not available instead of failing the read."""
        if metric in self.unavailable:
            return None
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - the same chokepoint, for what _get cannot wrap
            self.unavailable.setdefault(metric, nvml_reason(exc))
            return None

    def _nvlink(self, h: Any) -> tuple[float | None, float | None]:
        lib = self.lib
        ids = [lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX]
        values = self._get("nvlink", "nvmlDeviceGetFieldValues", h, ids)
        if values is NA or not values:
            return None, None
        out: list[float | None] = []
        for v in values:
            if getattr(v, "nvmlReturn", 0) != 0:
                self.unavailable.setdefault("nvlink", "no NVLink on this GPU")
                out.append(None)
            else:
                out.append(float(v.value.ullVal))  # KiB/s counters per NVML docs
        return out[0], out[1]

    def _gpm_metrics(self, index: int, h: Any) -> dict[str, float]:
        """GPM (Hopper+): DRAM bandwidth, SM and tensor activity between two samples."""
        if "gpm" in self.unavailable:
            return {}
        lib = self.lib
        support = self._get("gpm", "nvmlGpmQueryDeviceSupport", h)
        if support is NA or not getattr(support, "isSupportedDevice", 0):
            self.unavailable.setdefault("gpm", "GPM metrics need a Hopper or newer GPU")
            return {}
        sample = self._get("gpm", "nvmlGpmSampleAlloc")
        if sample is NA or self._get("gpm", "nvmlGpmSampleGet", h, sample) is NA:
            return {}
        previous, self._gpm[index] = self._gpm.get(index), sample
        if previous is None:
            return {}  # GPM metrics are rates between two samples: the next tick has them
        wanted = {
            "dram_bw_util": lib.NVML_GPM_METRIC_DRAM_BW_UTIL,
            "sm_util": lib.NVML_GPM_METRIC_SM_UTIL,
            "tensor_util": lib.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        }
        mg = lib.c_nvmlGpmMetricsGet_t()
        mg.version = lib.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(wanted)
        mg.sample1, mg.sample2 = previous, sample
        for i, metric_id in enumerate(wanted.values()):
            mg.metrics[i].metricId = metric_id
        got = self._get("gpm", "nvmlGpmMetricsGet", mg)
        self._get("gpm", "nvmlGpmSampleFree", previous)
        if got is NA:
            return {}
        return {k: float(mg.metrics[i].value) for i, k in enumerate(wanted)}

    def close(self) -> None:
        """Free GPM samples and shut NVML down; once (a second call does nothing)."""
        if self.available and not self._closed:
            self._closed = True
            for sample in self._gpm.values():
                self._get("gpm", "nvmlGpmSampleFree", sample)
            self._gpm.clear()
            self._get("shutdown", "nvmlShutdown")


def _text(x: Any) -> str | None:
    if x is NA or x is None:
        return None
    return x.decode(errors="replace") if isinstance(x, bytes) else str(x)


TREE_EVERY = 4  # readings between two looks at a session's processes (2 s at 0.5 s)


class NvmlCollector:
    """Reads NVML every ``interval`` seconds on its own thread (collector protocol)."""

    name = "nvml"

    def __init__(
        self,
        target_pid: int | None,
        interval: float = 0.5,
        lib: Any = None,
        *,
        others: Sequence[int] = (),
        children: bool = False,
    ) -> None:
        self.interval = interval
        self._reader = NvmlReader(target_pid, lib)
        #: a session of several processes (``others``: more targets; ``children``: their
        #: trees): "the target's memory" on a device is all of theirs, a service's GPU memory
        self._roots = [p for p in (target_pid, *others) if p]
        self._children = children
        self._following = False  # follow(): the roots change
        self._events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set: read now (stop, or a change of pace)
        self._fast: tuple[float, float] | None = None  # (interval, until monotonic time)
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self._reader.available

    def follow(self, pids: list[int]) -> None:
        """The session's processes are ``pids``, a list that changes (``watch --match``):
        looked at again as children are."""
        self._roots = pids
        self._following = True

    def sample_faster(self, interval: float, for_s: float) -> None:
        """Read every ``interval`` seconds for the next ``for_s`` seconds, then at the usual
        pace again (``watch`` after an incident's trigger); the next reading comes now."""
        self._fast = (interval, time.monotonic() + for_s)
        self._wake.set()

    def current_interval(self) -> float:
        fast = self._fast
        if fast is not None and time.monotonic() < fast[1]:
            return min(fast[0], self.interval)
        return self.interval

    def status(self) -> CollectorStatus:
        return self._reader.status(self.interval)

    def start(self) -> None:
        self._events.put(self.status())
        if not self.available or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="infertop-nvml", daemon=True)
        self._thread.start()

    def _session_pids(self) -> set[int]:
        """Every process of the session, in every pid namespace we can see (NVML's are the
        host's): the targets and, with ``children``, their descendants."""
        pids: set[int] = set()
        for root in list(self._roots):
            for pid in [root, *(descendants(root) if self._children else ())]:
                pids |= target_pids(pid)
        return pids

    def _run(self) -> None:
        known = dict(self._reader.unavailable)
        n = 0
        while not self._stop.is_set():
            if len(self._roots) > 1 or self._children or self._following:
                if n % TREE_EVERY == 0:  # children come and go: look again now and then
                    self._reader.target = self._session_pids()
                n += 1
            try:
                self._events.put(self._reader.read())
            except Exception as exc:  # noqa: BLE001 - a bug here must not end the session
                self._events.put(CollectorStatus(time.time(), "nvml", "failed", f"{type(exc).__name__}: {exc}"))
                return
            if self._reader.unavailable != known:  # say once what turned out missing
                known = dict(self._reader.unavailable)
                self._events.put(self.status())
            self._wake.wait(self.current_interval())
            self._wake.clear()

    def poll(self) -> list[object]:
        return drain(self._events)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._reader.close()


def probe_nvml() -> CollectorStatus:
    """Whether NVML is usable here, as a status (used when no collector runs)."""
    reader = NvmlReader(None)
    try:
        return reader.status(0.5)
    finally:
        reader.close()
