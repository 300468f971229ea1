"""GPU readings from NVML: one immutable reading per tick, every field optional.

A field NVML could not give is None; why is kept once per session in the collector's status,
not per reading. Units are NVML's, converted to plain SI-ish ones: bytes, %, KB/s, MHz, W, °C.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuDeviceReading:
    index: int
    name: str | None = None
    uuid: str | None = None
    memory_used: int | None = None  # bytes, whole device
    memory_total: int | None = None  # bytes
    process_memory: int | None = None  # bytes used by the target's processes on this device
    util_gpu: float | None = None  # % of time a kernel was running (NVML utilization.gpu)
    util_memory: float | None = None  # % of time device memory was read or written
    pcie_tx_kbs: float | None = None  # KB/s
    pcie_rx_kbs: float | None = None
    nvlink_tx_kbs: float | None = None
    nvlink_rx_kbs: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    throttle: tuple[str, ...] | None = None  # active clock-event (throttle) reasons
    dram_bw_util: float | None = None  # GPM, % (Hopper and newer)
    sm_util: float | None = None  # GPM, %
    tensor_util: float | None = None  # GPM, % any tensor pipe active
    processes: tuple[tuple[int, int], ...] = ()  # (pid as NVML reports it, bytes)


@dataclass(frozen=True, slots=True)
class GpuReading:
    t: float
    devices: tuple[GpuDeviceReading, ...]

    def used_by_target(self) -> tuple[int, ...]:
        """Indexes of the devices the target has memory on (they are shown first)."""
        return tuple(d.index for d in self.devices if d.process_memory)
