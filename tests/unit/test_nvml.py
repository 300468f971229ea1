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


def test_sample_faster_for_a_while_then_the_usual_pace() -> None:
    lib = FakeNvml("t4_no_gpm_no_nvlink.json", target_pid=os.getpid())
    col = NvmlCollector(os.getpid(), interval=5.0, lib=lib)
    col.start()
    try:
        col.sample_faster(0.02, for_s=0.5)
        assert col.current_interval() == 0.02
        deadline = time.monotonic() + 10
        readings: list[GpuReading] = []
        while len(readings) < 10 and time.monotonic() < deadline:
            readings += [e for e in col.poll() if isinstance(e, GpuReading)]
            time.sleep(0.01)
        assert len(readings) >= 10  # at 5 s a reading, this would have taken 45 s
        deadline = time.monotonic() + 10
        while col.current_interval() != 5.0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert col.current_interval() == 5.0  # the fast spell is over
        col.poll()
        time.sleep(0.3)
        assert len([e for e in col.poll() if isinstance(e, GpuReading)]) <= 1
    finally:
        t = time.monotonic()
        col.stop()
        assert time.monotonic() - t < 1.0  # stop wakes the 5 s wait


def test_unavailable_collector_starts_no_thread() -> None:
    col = NvmlCollector(1, lib=FakeNvml("h100_pair.json", init_error="LibraryNotFound"))
    col.start()
    assert col._thread is None
    assert [e.state for e in col.poll()] == ["unavailable"]
    col.stop()


def test_container_pids_are_mapped_through_nspid() -> None:
    pids = target_pids(os.getpid())
    assert os.getpid() in pids


def test_a_driver_older_than_the_bindings_loses_only_that_metric() -> None:
    lib = FakeNvml("h100_pair.json", target_pid=4242)
    for dev in lib.data["devices"]:  # e.g. a 525 driver has no ClocksEventReasons entry point
        dev["unsupported"] = {"nvmlDeviceGetCurrentClocksEventReasons": "FunctionNotFound"}
    reader = NvmlReader(4242, lib)
    d = reader.read().devices[0]
    assert d.throttle is None
    assert d.util_gpu == 92.0 and d.memory_used == 61203283968  # everything else is read
    assert reader.unavailable == {"throttle": "this driver's NVML lacks the function (driver older than the bindings)"}
    assert "driver older than the bindings" in reader.status(0.5).message


class _OldBindings(FakeNvml):
    """nvidia-ml-py from before GPM: the metric constants and structs do not exist."""

    def __getattribute__(self, name: str):  # type: ignore[no-untyped-def]
        if name.startswith("NVML_GPM") or name.startswith("c_nvmlGpm"):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return super().__getattribute__(name)


def test_bindings_older_than_the_gpu_lose_gpm_not_the_reading() -> None:
    lib = _OldBindings("h100_pair.json", target_pid=4242)
    reader = NvmlReader(4242, lib)
    reader.read()
    lib.advance()
    d = reader.read().devices[0]
    assert d.dram_bw_util is None and d.util_gpu == 17.0 and d.nvlink_rx_kbs == 0.0
    assert "too old" in reader.unavailable["gpm"]


def test_no_bindings_installed(monkeypatch) -> None:
    import infertop.collect.nvml as nvml

    def missing():  # type: ignore[no-untyped-def]
        raise ModuleNotFoundError("No module named 'pynvml'")

    monkeypatch.setattr(nvml, "_load_pynvml", missing)
    reader = NvmlReader(4242)
    assert not reader.available and reader.reason == "no GPU: no NVML bindings (No module named 'pynvml')"
    reader.close()  # nothing to shut down, and no error


def test_closing_twice_frees_each_gpm_sample_once() -> None:
    lib = FakeNvml("h100_pair.json", target_pid=4242)
    freed: list[int] = []
    real_free = lib.nvmlGpmSampleFree
    lib.nvmlGpmSampleFree = lambda s: (freed.append(lib._key(s)), real_free(s))  # type: ignore[method-assign]
    reader = NvmlReader(4242, lib)
    reader.read()
    reader.close()
    reader.close()
    assert len(freed) == len(set(freed)) == 2 and not lib.initialised


@pytest.mark.slow  # starts a child process
def test_a_session_of_several_processes_counts_all_their_gpu_memory() -> None:
    """With --children (or several PIDs), "the target's memory" on a GPU is the whole
    session's: a child process (a real one, below this test) that holds the memory NVML lists
    counts, and puts its GPU first; without --children it does not."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        def first_reading(children: bool) -> GpuReading:
            lib = FakeNvml("h100_pair.json", target_pid=child.pid)  # the child holds 54.7 GiB
            col = NvmlCollector(os.getpid(), interval=0.05, lib=lib, children=children)
            col.start()
            time.sleep(0.3)
            col.stop()
            return next(e for e in col.poll() if isinstance(e, GpuReading))

        tree = first_reading(children=True)
        assert tree.devices[0].process_memory == 58720256000
        assert tree.used_by_target() == (0,)
        alone = first_reading(children=False)
        assert alone.devices[0].process_memory == 0 and alone.used_by_target() == ()
    finally:
        child.kill()
        child.wait()
