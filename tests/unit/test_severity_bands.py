"""Every finding's severity comes from the one table of bands, ``config.SEVERITY_BANDS``
(docs/findings.md): each rule has its bands there, and moving a rule's bands moves its
finding's severity, on evidence that makes the rule fire."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from infertop import config
from infertop.analysis.cpu_contention import CpuContention, ProcessCpu
from infertop.analysis.findings import RULES, FindingInput, MemoryState
from infertop.analysis.generation import GenerationSummary, KvCache, Spread
from infertop.analysis.gpu_series import NvmlBusy
from infertop.analysis.host_memory import ProcessMemory
from infertop.analysis.pauses import GcSummary, LoopLagSummary, PauseLine
from infertop.analysis.shares import Latency
from infertop.analysis.stragglers import Step, straggler_findings
from infertop.analysis.trace_ops import OutsideOps
from infertop.config import SEVERITY_BANDS, FindingThresholds, SeverityBands
from infertop.model.findings import Finding
from infertop.model.host_memory import CgroupMemory
from infertop.model.rows import MemcpyRow, OpRow
from infertop.trace.gpu import GpuSummary

TH = FindingThresholds()
GIB = 1 << 30


def _gpu(busy: float = 0.9, memcpy: tuple[MemcpyRow, ...] = ()) -> GpuSummary:
    return GpuSummary({"compute": 1.0, "memory": 0.0, "communication": 0.0}, busy * 1e6, 1e6,
                      (), memcpy, 0, (), None)  # fmt: skip


def _growing(limit: int | None = None, left: int = GIB) -> ProcessMemory:
    """A process whose RSS grows 2 MiB/s along a line for 100 s past warm-up, in a memory
    cgroup with ``left`` bytes under its ``limit`` (None: no cgroup)."""
    cg = None if limit is None else CgroupMemory(2, "/svc", limit, limit - left, 0)
    return ProcessMemory(
        pid=7, t_first=0.0, t_last=125.0, rss_first=GIB, rss_last=GIB + (200 << 20), rss_max=2 * GIB,
        rss_anon=None, rss_file=None, rss_shmem=None, swap_last=None, swap_max=None,
        major_faults_per_s=0.0, minor_faults_per_s=0.0, recent_major_faults_per_s=0.0,
        growth_bytes_per_s=float(2 << 20), growth_r2=0.99, cgroup=cg, oom_kills_during=0,
        growth_t0=25.0, growth_t1=125.0, growth_recent_bytes_per_s=float(2 << 20),
    )  # fmt: skip


def _generation(headroom: int) -> GenerationSummary:
    lat = Latency(10.0, 20.0, 30.0)
    spread = Spread(100.0, 100.0, 100.0)
    kv = KvCache(GIB, GIB, 1024.0, "cuda:0", headroom, 3 * GIB)
    return GenerationSummary(4, lat, lat, lat, 100.0, spread, spread, spread, (), kv, ())


#: each band's rule on evidence that makes it fire, away from what else sets its severity
#: (no OOM, no allocator retry, no long GC pause, no starved op thread)
FIRING: dict[str, FindingInput] = {
    "memcpy-pageable": FindingInput(gpu=_gpu(memcpy=(MemcpyRow("HtoD", "pageable", 4, 4096, 10.0),))),
    "memcpy-sync": FindingInput(wall_us=1e6, host_syncs={"cudaStreamSynchronize": (10, 60_000.0)}),
    "memcpy-small": FindingInput(wall_us=1e6, transfer_bytes=np.array([1024] * 2000)),
    "copy-heavy": FindingInput(
        ops=(OpRow("aten::copy_", "cpu", 100, 15_000, 15_000), OpRow("aten::mm", "cpu", 100, 85_000, 85_000)),
        outside_ops=OutsideOps(wall_us=120_000, in_ops_us=100_000, ops=200),
    ),
    "python-overhead": FindingInput(outside_ops=OutsideOps(wall_us=1e6, in_ops_us=0.5e6, ops=500)),
    "tiny-ops": FindingInput(gpu=_gpu(busy=0.3), kernel_durations_us=np.array([5.0] * 80 + [50.0] * 20)),
    "tiny-ops:cpu": FindingInput(outside_ops=OutsideOps(wall_us=1e6, in_ops_us=0.5e6, ops=100_000)),
    "gpu-idle": FindingInput(nvml=NvmlBusy(0.3, 10.0, 10, (0,), ())),
    "preprocess-hot": FindingInput(stage_shares={"preprocess": 0.4}),
    "serialize-hot": FindingInput(stage_shares={"serialize": 0.2}),
    "ipc-heavy": FindingInput(stage_shares={"ipc": 0.2}),
    "queue-wait": FindingInput(queue_latency_share=0.5),
    "engine-step-overhead": FindingInput(engine_outside_forward=0.5, engine_worker_samples=100),
    "gil-contention": FindingInput(gil_wait_share=0.4),
    "gc-pauses": FindingInput(gc=GcSummary(((2, PauseLine(10, 100.0, 10.0, 20.0, 20.0)),), 10, 100.0, 5,
                                           0.1, 20.0, 0.0)),
    "event-loop-lag": FindingInput(event_loop=LoopLagSummary(beats=100, loops=1, p50_ms=1.0, p99_ms=80.0,
                                                             max_ms=90.0)),
    "gpu-memory-pressure": FindingInput(memory=MemoryState(80 * GIB, 75 * GIB, 70 * GIB)),
    "kv-cache-headroom": FindingInput(generation=_generation(headroom=GIB)),
    "kv-cache-headroom:usage": FindingInput(engine_kv_usage=(0.5, 0.95)),
    "allocator-fragmentation": FindingInput(memory=MemoryState(80 * GIB, 10 * GIB, 5 * GIB)),
    "memory-growth": FindingInput(host_memory=(_growing(),)),
    "memory-growth:limit": FindingInput(host_memory=(_growing(limit=4 * GIB),)),
    "memory-pressure": FindingInput(host_memory=(_growing(limit=10 * GIB, left=GIB // 2),)),
    "cpu-starved": FindingInput(cpu=CpuContention((ProcessCpu(7, 6.0, 4.0),))),
}  # fmt: skip

#: bands that only ever raise a finding to high (the rest of its severity is its main band's)
RAISE_ONLY = {"memory-growth:limit"}


def _rule(band: str) -> str:
    return band.split(":")[0]


def _finding(band: str) -> Finding | None:
    if band == "straggler":  # a rule of the processes, not of one FindingInput
        steps = {1: {i: Step(100.0, 0.0) for i in range(6)}, 2: {i: Step(100.0, 0.0) for i in range(6)},
                 3: {i: Step(120.0, 0.0) for i in range(6)}}  # fmt: skip
        found = straggler_findings(steps, {}, TH)
        return found[0] if found else None
    return RULES[_rule(band)](FIRING[band], TH)


def test_every_rule_has_its_bands_in_the_table_and_every_band_a_rule() -> None:
    rules = set(RULES) | {"straggler"}
    assert {_rule(b) for b in SEVERITY_BANDS} == rules
    assert set(FIRING) | {"straggler"} == set(SEVERITY_BANDS), "each band needs evidence here"


def _never(b: SeverityBands) -> SeverityBands:
    return replace(b, medium=None, high=-math.inf if b.falling else math.inf, floor="low")


@pytest.mark.parametrize("band", sorted(SEVERITY_BANDS))
def test_the_rule_s_severity_follows_its_bands(band: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _finding(band) is not None, "the evidence must make the rule fire"
    b = SEVERITY_BANDS[band]
    for other in [o for o in SEVERITY_BANDS if _rule(o) == _rule(band)]:  # the rule's others away
        monkeypatch.setitem(config.SEVERITY_BANDS, other, _never(SEVERITY_BANDS[other]))
    always, never = (math.inf, -math.inf) if b.falling else (-math.inf, math.inf)
    cases = [
        (replace(b, high=always), "high"),
        (replace(b, medium=always, high=never, floor="low"), "low" if band in RAISE_ONLY else "medium"),
        (replace(b, medium=None, high=never, floor="low"), "low"),
        (replace(b, medium=None, high=never, floor="medium"), "low" if band in RAISE_ONLY else "medium"),
    ]
    for bands, expected in cases:
        monkeypatch.setitem(config.SEVERITY_BANDS, band, bands)
        found = _finding(band)
        assert found is not None and found.severity == expected, (bands, found)


def test_the_defaults_are_the_documented_ones() -> None:
    """Severities as docs/findings.md gives them, at a few points."""
    assert SEVERITY_BANDS["memcpy-pageable"].severity(0.10, TH) == "high"
    assert SEVERITY_BANDS["memcpy-pageable"].severity(0.0999, TH) == "medium"
    assert SEVERITY_BANDS["preprocess-hot"].severity(0.5, TH) == "high"  # 2x its 25 %
    assert SEVERITY_BANDS["preprocess-hot"].severity(0.37, TH) == "low"  # under 1.5x
    assert SEVERITY_BANDS["event-loop-lag"].severity(199.0, TH) == "medium"
    assert SEVERITY_BANDS["event-loop-lag"].severity(200.0, TH) == "high"  # 4x its 50 ms
    assert SEVERITY_BANDS["gpu-memory-pressure"].severity(0.5, TH, at_least="high") == "high"
    assert SEVERITY_BANDS["memory-growth:limit"].severity(3600.0, TH) == "high"
    assert SEVERITY_BANDS["memory-growth:limit"].severity(3601.0, TH) == "low"
