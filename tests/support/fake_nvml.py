"""A stand-in for the ``pynvml`` module, driven by readings in tests/fixtures/nvml/.

Only for machines without a GPU. It answers the calls infertop makes with the fixture's
values (cycling through its ticks) and fails the way NVML does, raising the real exception
classes of the installed bindings, so infertop's error handling meets real error types.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"


def _error(kind: str) -> Exception:
    return getattr(pynvml, f"NVMLError_{kind}")()


class FakeNvml:
    """Module-like object: attribute access mirrors ``pynvml`` for the functions we use."""

    # constants: the bindings' own values
    NVML_PCIE_UTIL_TX_BYTES = pynvml.NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = pynvml.NVML_PCIE_UTIL_RX_BYTES
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    NVML_GPM_METRIC_DRAM_BW_UTIL = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL
    NVML_GPM_METRIC_SM_UTIL = pynvml.NVML_GPM_METRIC_SM_UTIL
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
    NVML_GPM_METRICS_GET_VERSION = pynvml.NVML_GPM_METRICS_GET_VERSION
    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t

    def __init__(self, fixture: str | None, target_pid: int = 0, init_error: str | None = None) -> None:
        self.data = json.loads((FIXTURES / fixture).read_text()) if fixture else {"devices": []}
        self.target_pid = target_pid
        self.init_error = init_error
        self.tick = 0
        self.initialised = False
        self.gpm_samples: dict[int, tuple[int, int]] = {}  # sample address -> (device, tick)

    # -- lifecycle
    def nvmlInit(self) -> None:
        if self.init_error:
            raise _error(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.data["devices"])

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def advance(self) -> None:
        """Move every device to its next recorded tick (tests call this between reads)."""
        self.tick += 1

    # -- per-device values
    def _dev(self, h: int, fn: str) -> dict[str, Any]:
        dev = self.data["devices"][h]
        failure = dev.get("unsupported", {}).get(fn)
        if failure:
            raise _error(failure)
        return dev

    def _now(self, h: int, fn: str) -> dict[str, Any]:
        ticks = self._dev(h, fn)["ticks"]
        return ticks[self.tick % len(ticks)]

    def nvmlDeviceGetName(self, h: int) -> str:
        return self._dev(h, "nvmlDeviceGetName")["name"]

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._dev(h, "nvmlDeviceGetUUID")["uuid"]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        total = self._dev(h, "nvmlDeviceGetMemoryInfo")["memory_total"]
        used = self._now(h, "nvmlDeviceGetMemoryInfo")["memory_used"]
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        t = self._now(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=t["util_gpu"], memory=t["util_memory"])

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        rows = self._now(h, "nvmlDeviceGetComputeRunningProcesses").get("processes", [])
        return [
            SimpleNamespace(pid=self.target_pid if pid == "TARGET" else pid, usedGpuMemory=used)
            for pid, used in rows
        ]

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        t = self._now(h, "nvmlDeviceGetPcieThroughput")
        return t["pcie_tx"] if counter == self.NVML_PCIE_UTIL_TX_BYTES else t["pcie_rx"]

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        t = self._now(h, "nvmlDeviceGetClockInfo")
        return t["sm_clock"] if clock == self.NVML_CLOCK_SM else t["mem_clock"]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._now(h, "nvmlDeviceGetPowerUsage")["power"]

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._now(h, "nvmlDeviceGetTemperature")["temperature"]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._now(h, "nvmlDeviceGetCurrentClocksEventReasons")["throttle"]

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[int]) -> list[Any]:
        t = self._now(h, "nvmlDeviceGetFieldValues")
        vals = {self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: t.get("nvlink_tx"),
                self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: t.get("nvlink_rx")}  # fmt: skip
        return [
            SimpleNamespace(
                nvmlReturn=0 if vals.get(i) is not None else pynvml.NVML_ERROR_NOT_SUPPORTED,
                value=SimpleNamespace(ullVal=vals.get(i) or 0),
            )
            for i in ids
        ]

    # -- GPM
    def nvmlGpmQueryDeviceSupport(self, h: int) -> Any:
        return SimpleNamespace(isSupportedDevice=int(self._dev(h, "nvmlGpmQueryDeviceSupport").get("gpm_supported", False)))

    @staticmethod
    def _key(sample: Any) -> int:
        return int(ctypes.cast(sample, ctypes.c_void_p).value or 0)

    def nvmlGpmSampleAlloc(self) -> Any:
        """An opaque handle of the bindings' own type, with a made-up address as identity."""
        address = 0x1000 * (len(self.gpm_samples) + 1 + self.tick * 64)
        sample = ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlGpmSample_t)
        self.gpm_samples[address] = (-1, -1)
        return sample

    def nvmlGpmSampleGet(self, h: int, sample: Any) -> Any:
        self.gpm_samples[self._key(sample)] = (h, self.tick)
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.gpm_samples.pop(self._key(sample), None)

    def nvmlGpmMetricsGet(self, mg: Any) -> Any:
        h, tick = self.gpm_samples[self._key(mg.sample2)]
        ticks = self.data["devices"][h]["ticks"]
        gpm = ticks[tick % len(ticks)]["gpm"]
        by_id = {self.NVML_GPM_METRIC_DRAM_BW_UTIL: gpm["dram_bw_util"],
                 self.NVML_GPM_METRIC_SM_UTIL: gpm["sm_util"],
                 self.NVML_GPM_METRIC_ANY_TENSOR_UTIL: gpm["tensor_util"]}  # fmt: skip
        for i in range(mg.numMetrics):
            mg.metrics[i].value = by_id[mg.metrics[i].metricId]
        return mg
