"""NVML readings as the GPU panel's series, the report's gpu fields and the GPU findings.

Readings come out of the real NVML layer reading the fake pynvml (tests/support/fake_nvml.py):
one device whose utilisation and memory per tick are given here, in NVML's units.
"""

from __future__ import annotations

from dataclasses import replace

from infertop.analysis.session import Session
from infertop.analysis.snapshot import build_snapshot
from infertop.collect.nvml import NvmlReader
from infertop.config import FindingThresholds
from infertop.model.events import (
    AllocatorReading,
    CollectorStatus,
    Frame,
    FrameDef,
    SampleWindow,
    StackDef,
    TargetInfo,
    ThreadDef,
)
from infertop.model.gpu import GpuReading
from infertop.report.build import build_report
from infertop.report.text import render_text
from tests.support.fake_nvml import FakeNvml

GIB = 1 << 30
T0 = 1000.0
TOTAL = 80 * GIB


def _tick(util: float, mine: int, others: int) -> dict:
    procs = [["TARGET", mine]] if mine else []
    procs += [[7001, others]] if others else []
    return {"memory_used": mine + others, "util_gpu": util, "util_memory": util / 2,
            "pcie_tx": 1024, "pcie_rx": 4096, "sm_clock": 1980, "mem_clock": 2619,
            "power": 300000, "temperature": 60, "throttle": 0, "processes": procs}  # fmt: skip


def readings(utils: list[float], mine: int = 40 * GIB, others: int = 2 * GIB, devices: int = 1) -> list[GpuReading]:
    """Two readings a second: ``utils[k]`` is reading k's utilization.gpu on device 0; other
    devices (if any) are idle and hold only another process's memory."""
    lib = FakeNvml(None, target_pid=4242)
    dev0 = {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a", "memory_total": TOTAL,
            "gpm_supported": False, "unsupported": {"nvmlDeviceGetFieldValues": "NotSupported"},
            "ticks": [_tick(u, mine, others) for u in utils]}  # fmt: skip
    idle = dict(dev0, uuid="GPU-b", ticks=[_tick(0, 0, GIB)])
    lib.data = {"devices": [dev0] + [idle] * (devices - 1)}
    reader = NvmlReader(4242, lib)
    out = []
    for k in range(len(utils)):
        out.append(GpuReading(T0 + 0.25 + 0.5 * k, reader.read().devices))
        lib.advance()
    reader.close()
    return out


def session(rs: list[GpuReading], seconds: int, working: bool = True, allocator: AllocatorReading | None = None) -> Session:
    """One py-spy window a second; the main thread in the model's forward (or idle)."""
    s = Session()
    for ev in (TargetInfo(4242, "python serve.py", "3.11.7", None, T0), ThreadDef(1, "MainThread"),
               FrameDef(0, Frame("Model.forward", "/srv/model.py", 12)), StackDef(0, (0,)),
               CollectorStatus(T0, "nvml", "running", "1 GPU(s), every 0.5 s")):  # fmt: skip
        s.apply(ev)
    for i in range(seconds):
        counts = ((1, 0, 90),) if working else ()
        s.apply(SampleWindow(T0 + i, T0 + i + 1, 100.0, 100, counts, 0, 0.0, 1))
    for r in rs:
        s.apply(r)
    if allocator is not None:
        s.apply(allocator)
    return s


def rules(rep: dict) -> dict[str, dict]:
    return {f["rule"]: f for f in rep["findings"]}


def test_series_are_bucketed_on_the_stage_windows_so_a_stall_lines_up() -> None:
    utils = [90.0] * 20
    utils[12] = utils[13] = 0.0  # second 6: the GPU stalls
    snap = build_snapshot(session(readings(utils), 10), history=120)
    series = snap.nvml.series[0].values["util_gpu"]
    assert len(series) == len(snap.history) == 10
    assert series[6] == 0.0 and all(v == 90.0 for i, v in enumerate(series) if i != 6)
    assert snap.nvml.session_means[0]["util_gpu"] == 81.0
    assert snap.nvml.series[0].values["pcie_kbs"][0] == 5120.0  # tx + rx, KB/s


def test_the_targets_gpu_comes_first() -> None:
    rs = readings([50.0] * 4, devices=2)
    swapped = [GpuReading(r.t, (replace(r.devices[1], index=0), replace(r.devices[0], index=1))) for r in rs]
    snap = build_snapshot(session(swapped, 2))
    assert [d.index for d in snap.nvml.devices] == [1, 0]
    assert snap.nvml.devices[0].process_memory == 40 * GIB


def test_replay_at_a_moment_sees_only_readings_taken_by_then() -> None:
    s = session(readings([10.0, 20.0, 30.0, 40.0]), 2)
    snap = build_snapshot(s, t=T0 + 1.0)
    assert [r.devices[0].util_gpu for r in snap.nvml.readings] == [10.0, 20.0]


def test_report_fills_gpu_memory_from_nvml_and_the_allocator() -> None:
    alloc = AllocatorReading(T0 + 1, 0, 20 * GIB, 36 * GIB, 30 * GIB, 0, 0)
    snap = build_snapshot(session(readings([60.0, 80.0, 100.0, 40.0]), 2, allocator=alloc))
    rep = build_report(snap, "recording", "x.infertop")
    g = rep["gpu"]
    assert g["available"] and g["reason"] is None
    assert g["memory"] == {
        "device": 0, "allocated": 20 * GIB, "reserved": 36 * GIB, "peak_allocated": 30 * GIB,
        "alloc_retries": 0, "ooms": 0, "nvml_device": 0, "total": TOTAL, "used": 42 * GIB,
        "process": 40 * GIB, "others": 2 * GIB, "free": 38 * GIB,
    }  # fmt: skip
    (u,) = g["utilization"]
    assert u["target"] and u["readings"] == 4 and u["name"] == "NVIDIA A100-SXM4-80GB"
    assert u["util_gpu"] == {"mean": 70.0, "p50": 80.0, "p95": 100.0, "max": 100.0}
    assert u["power_w"]["mean"] == 300.0 and u["nvlink_tx_kbs"] is None and u["dram_bw_util"] is None
    text = render_text(rep)
    assert "this process 40.00 GiB, others 2.00 GiB, free 38.00 GiB of 80.00 GiB" in text
    assert "SM busy 70%" in text


def test_without_the_agent_memory_is_nvmls_alone() -> None:
    rep = build_report(build_snapshot(session(readings([90.0] * 4), 2)), "recording", "x")
    m = rep["gpu"]["memory"]
    assert m["allocated"] is None and m["reserved"] is None and m["process"] == 40 * GIB
    assert "memory (cuda" not in render_text(rep)  # no allocator line with empty numbers


def test_without_nvml_the_report_says_why() -> None:
    s = session([], 2)
    s.apply(CollectorStatus(T0, "nvml", "unavailable", "no GPU: NVML library not found (no NVIDIA driver on this host)"))
    g = build_report(build_snapshot(s), "recording", "x")["gpu"]
    assert not g["available"] and "NVML library not found" in g["reason"]
    assert g["memory"] is None and g["utilization"] is None


# -- findings ------------------------------------------------------------------------------------
def test_gpu_idle_from_nvml_when_the_target_works_and_the_gpu_waits() -> None:
    rep = build_report(build_snapshot(session(readings([20.0, 0.0, 0.0, 30.0] * 5), 10)), "recording", "x")
    f = rules(rep)["gpu-idle"]
    assert f["evidence"]["source"] == "nvml" and f["evidence"]["busy_share"] == 0.125
    assert f["severity"] == "high" and f["evidence"]["gaps_s"][0] == 1.0  # two 0 % readings
    assert f["where"] == ["GPU 0"]


def test_no_gpu_idle_when_busy_or_when_the_target_is_not_working() -> None:
    busy = build_report(build_snapshot(session(readings([95.0] * 20), 10)), "recording", "x")
    assert "gpu-idle" not in rules(busy)
    resting = session(readings([0.0] * 20), 10, working=False)  # a server with no requests
    assert "gpu-idle" not in rules(build_report(build_snapshot(resting), "recording", "x"))


def test_no_gpu_idle_for_a_target_that_holds_no_gpu_memory() -> None:
    rs = readings([0.0] * 20, mine=0)  # another process's GPU: not the target's business
    assert "gpu-idle" not in rules(build_report(build_snapshot(session(rs, 10)), "recording", "x"))


def test_memory_pressure_from_nvml_alone_and_from_the_allocator() -> None:
    full = readings([90.0] * 4, mine=74 * GIB, others=GIB)
    f = rules(build_report(build_snapshot(session(full, 2)), "recording", "x"))["gpu-memory-pressure"]
    assert f["evidence"]["source"] == "nvml" and f["evidence"]["total"] == TOTAL
    assert f["title"].startswith("the target's GPU memory (NVML) at 92%")
    alloc = AllocatorReading(T0 + 1, 0, 70 * GIB, 78 * GIB, 70 * GIB, 0, 0)
    rep = build_report(build_snapshot(session(readings([90.0] * 4), 2, allocator=alloc)), "recording", "x")
    f = rules(rep)["gpu-memory-pressure"]
    assert f["evidence"]["source"] == "allocator" and f["title"].startswith("reserved GPU memory at 98%")
    assert f["severity"] == "high"


def test_no_pressure_and_fragmentation_measured_against_the_device() -> None:
    alloc = AllocatorReading(T0 + 1, 0, 10 * GIB, 30 * GIB, 12 * GIB, 0, 0)
    found = rules(build_report(build_snapshot(session(readings([90.0] * 4), 2, allocator=alloc)), "recording", "x"))
    assert "gpu-memory-pressure" not in found
    frag = found["allocator-fragmentation"]
    assert frag["evidence"]["device_total"] == TOTAL and frag["evidence"]["slack_share"] == 0.6667


def test_thresholds_apply_to_the_nvml_rules() -> None:
    rs = readings([60.0] * 20)
    snap = build_snapshot(session(rs, 10))
    assert "gpu-idle" not in rules(build_report(snap, "recording", "x"))
    strict = FindingThresholds(gpu_idle_busy=0.7)
    assert "gpu-idle" in rules(build_report(snap, "recording", "x", strict))


def test_a_headless_recording_carries_the_readings_into_the_report(tmp_path, capsys) -> None:
    import os

    from infertop.collect.nvml import NvmlCollector
    from infertop.config import Config
    from infertop.headless import record_headless
    from infertop.record.reader import read_recording
    from infertop.sources import ReplaySource

    pid = os.getpid()
    path = str(tmp_path / "gpu.infertop")
    nvml = NvmlCollector(pid, interval=0.05, lib=FakeNvml("h100_pair.json", target_pid=pid))
    assert record_headless(TargetInfo(pid, started=T0), Config(), path, 0.5, [nvml]) == 0
    src = ReplaySource(read_recording(path), Config())
    rep = build_report(build_snapshot(src.session, t=src.t), "recording", path)
    g = rep["gpu"]
    assert g["available"] and g["memory"]["process"] == 58720256000 and g["memory"]["nvml_device"] == 0
    assert [u["index"] for u in g["utilization"]] == [0, 1] and g["utilization"][0]["target"]
