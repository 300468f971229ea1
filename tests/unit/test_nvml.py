"""The NVML layer against recorded readings (no GPU here): values, units, and every way NVML fails."""

from __future__ import annotations

import os
import time

import pytest

from infertop.collect.nvml import NvmlCollector, NvmlReader, probe_nvml, target_pids
from infertop.model.events import CollectorStatus
from infertop.model.gpu import GpuReading
from tests.support.fake_nvml import FakeNvml


def test_readings_in_plain_units_and_the_targets_own_memory() -> None:
    lib = FakeNvml("h100_pair.json", target_pid=4242)
    reader = NvmlReader(4242, lib)
    first = reader.read()
    d0, d1 = first.devices
    assert d0.name == "NVIDIA H100 80GB HBM3" and d0.memory_total == 85520809984
    assert d0.process_memory == 58720256000  # the target's, not the other process's 2 GiB
    assert d1.process_memory == 0
    assert first.used_by_target() == (0,)
    assert d0.power_w == 612.0  # NVML gives milliwatts
    assert d0.util_gpu == 92.0 and d0.util_memory == 41.0
    assert d0.pcie_rx_kbs == 812544.0 and d0.nvlink_tx_kbs == 1048576.0
    assert d0.throttle == ("sw_power_cap",) and d1.throttle == ("gpu_idle",)
    assert d0.dram_bw_util is None  # GPM is a rate: needs two samples
    lib.advance()
    second = reader.read().devices[0]
    assert (second.dram_bw_util, second.sm_util, second.tensor_util) == (2.0, 12.5, 0.0)
    assert second.util_gpu == 17.0
    assert reader.unavailable == {}
    reader.close()
    assert not lib.initialised and lib.gpm_samples == {}  # samples freed, NVML shut down


def test_missing_metrics_are_none_with_reasons_said_once() -> None:
    lib = FakeNvml("t4_no_gpm_no_nvlink.json", target_pid=4242)
    reader = NvmlReader(4242, lib)
    d = reader.read().devices[0]
    assert d.util_gpu == 99.0 and d.temperature_c == 80.0
    assert d.throttle == ("sw_thermal", "hw_thermal")
    assert d.process_memory is None and d.processes == ()
    assert d.nvlink_tx_kbs is None and d.dram_bw_util is None
    assert reader.unavailable == {
        "processes": "no permission to query NVML",
        "gpm": "GPM metrics need a Hopper or newer GPU",
        "nvlink": "not supported on this GPU",
    }
    status = reader.status(0.5)
    assert status.state == "running" and "no permission" in status.message


@pytest.mark.parametrize(
    "error,reason",
    [
        ("LibraryNotFound", "NVML library not found"),
        ("DriverNotLoaded", "driver not loaded"),
        ("NoPermission", "no permission"),
        ("LibRmVersionMismatch", "versions do not match"),
    ],
)
def test_no_library_no_driver_no_permission_mismatch(error: str, reason: str) -> None:
    reader = NvmlReader(4242, FakeNvml("h100_pair.json", init_error=error))
    assert not reader.available
    assert reason in (reader.reason or "")
    status = reader.status(0.5)
    assert status.state == "unavailable" and status.message.startswith("no GPU: ")


def test_no_device() -> None:
    reader = NvmlReader(4242, FakeNvml(None))
    assert not reader.available and reader.reason == "no GPU: NVML sees 0 devices"


def test_this_machine_says_plainly_there_is_no_gpu() -> None:
    status = probe_nvml()
    assert isinstance(status, CollectorStatus) and status.collector == "nvml"
    if status.state == "unavailable":
        assert status.message.startswith("no GPU: ")


def test_collector_reads_each_tick_and_says_what_is_missing() -> None:
    lib = FakeNvml("t4_no_gpm_no_nvlink.json", target_pid=os.getpid())
    col = NvmlCollector(os.getpid(), interval=0.05, lib=lib)
    col.start()
    time.sleep(0.3)
    col.stop()
    events = col.poll()
    readings = [e for e in events if isinstance(e, GpuReading)]
    statuses = [e for e in events if isinstance(e, CollectorStatus)]
    assert len(readings) >= 3
    assert statuses[0].state == "running"
    assert "no permission" in statuses[-1].message  # learnt on the first read, said once
    assert len(statuses) == 2


def test_unavailable_collector_starts_no_thread() -> None:
    col = NvmlCollector(1, lib=FakeNvml("h100_pair.json", init_error="LibraryNotFound"))
    col.start()
    assert col._thread is None
    assert [e.state for e in col.poll()] == ["unavailable"]
    col.stop()


def test_container_pids_are_mapped_through_nspid() -> None:
    pids = target_pids(os.getpid())
    assert os.getpid() in pids
