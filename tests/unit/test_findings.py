"""Findings: right on the real GPU traces, and each rule at and around its threshold."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from infertop.analysis.findings import RULES, FindingInput, MemoryState, evaluate
from infertop.analysis.findings.session import ipc_of_requests
from infertop.analysis.findings.trace import trace_input
from infertop.analysis.pauses import GcSummary, LoopLagSummary, PauseLine
from infertop.analysis.requests import summarize_requests
from infertop.analysis.trace_ops import OutsideOps
from infertop.config import FindingThresholds
from infertop.model.rows import MemcpyRow, OpRow
from infertop.trace.gpu import GpuSummary
from infertop.trace.table import read_trace
from tests.support import data
from tests.support.request_spans import API, WORKER, collecting_server

TRACES = data.TRACES
TH = FindingThresholds()


def rules_on(name: str) -> dict[str, str]:
    fs = evaluate(trace_input(read_trace(str(data.trace(f"{name}.json.gz")))))
    for f in fs:  # every finding carries its evidence, numbers and a fix
        assert f.severity in ("high", "medium", "low") and f.title and f.hint and f.evidence
    return {f.rule: f.severity for f in fs}


def test_alexnet_raises_memcpy_pageable_high() -> None:
    assert rules_on("a100_alexnet_pageable_memcpy")["memcpy-pageable"] == "high"


@pytest.mark.parametrize("name", ["v100_training_rank0", "cpu_only_rank34"])
def test_no_pageable_copies_no_memcpy_pageable(name: str) -> None:
    assert "memcpy-pageable" not in rules_on(name)


def test_cpu_only_trace_raises_nothing_its_data_does_not_support() -> None:
    assert rules_on("cpu_only_rank34") == {}


def test_profiler_stop_synchronize_is_not_a_host_sync() -> None:
    # v100's only cudaDeviceSynchronize (89 ms) is outside every op: the profiler's own
    assert "memcpy-sync" not in rules_on("v100_training_rank0")


def test_launch_bound_a100_trace() -> None:
    found = rules_on("a100_80gb_rank0")
    assert {"tiny-ops", "gpu-idle", "memcpy-small"} <= set(found)


def test_every_spec_rule_is_registered() -> None:
    assert set(RULES) == {
        "memcpy-pageable", "memcpy-sync", "memcpy-small", "copy-heavy", "python-overhead",
        "tiny-ops", "gpu-idle", "preprocess-hot", "serialize-hot", "queue-wait",
        "gil-contention", "gpu-memory-pressure", "allocator-fragmentation",
        "gc-pauses", "event-loop-lag",  # the tail issue's: docs/findings.md
        "cpu-starved",  # the host's CPU as the cause: its threads' waits for one
        "ipc-heavy",  # the multi-process servers': the hop between processes
        "kv-cache-headroom",  # generative inference: the largest batch's cache and memory left
        "engine-step-overhead",  # an LLM engine's model worker outside its forward
        "memory-growth", "memory-pressure",  # host memory (issue 49): growth, the limit, faults
    }  # fmt: skip


# -- each rule at and around its threshold, on small synthetic evidence ----------------------
def gpu(busy: float = 0.9, memcpy=(), gaps=()) -> GpuSummary:
    return GpuSummary({"compute": 1.0, "memory": 0.0, "communication": 0.0}, busy * 1e6, 1e6,
                      tuple(gaps), tuple(memcpy), 0, (), None)  # fmt: skip


def fires(rule: str, inp: FindingInput, th: FindingThresholds = TH) -> bool:
    return RULES[rule](inp, th) is not None


@pytest.mark.parametrize("share,expected", [(0.24, False), (0.25, True), (0.6, True)])
def test_preprocess_hot_threshold(share: float, expected: bool) -> None:
    assert fires("preprocess-hot", FindingInput(stage_shares={"preprocess": share})) is expected


@pytest.mark.parametrize("share,expected", [(0.149, False), (0.15, True)])
def test_serialize_hot_threshold(share: float, expected: bool) -> None:
    assert fires("serialize-hot", FindingInput(stage_shares={"serialize": share})) is expected


@pytest.mark.parametrize("share,expected", [(0.149, False), (0.15, True)])
def test_ipc_heavy_threshold(share: float, expected: bool) -> None:
    assert fires("ipc-heavy", FindingInput(stage_shares={"ipc": share})) is expected


def test_ipc_heavy_says_where_and_what_to_do() -> None:
    f = RULES["ipc-heavy"](
        FindingInput(stage_shares={"ipc": 0.25}, stage_where={"ipc": ("ForkingPickler.dumps",)}), TH
    )
    assert f is not None and f.title == "ipc takes 25% of active time" and f.severity == "medium"
    assert f.where == ("ForkingPickler.dumps",) and "shared memory" in f.hint


def test_ipc_heavy_reads_request_latency_where_requests_were_followed_across_processes() -> None:
    # the samples say 40 % ipc (a worker blocked on its pipe), the requests 10 %: the requests'
    # latency decides, either way
    quiet = FindingInput(stage_shares={"ipc": 0.40}, ipc_latency_share=0.10, ipc_latency_ms=(4.0, 40.0))
    assert not fires("ipc-heavy", quiet)
    loud = FindingInput(stage_shares={"ipc": 0.02}, ipc_latency_share=0.31, ipc_latency_ms=(12.5, 40.0),
                        stage_where={"ipc": ("Connection._send",)})  # fmt: skip
    f = RULES["ipc-heavy"](loud, TH)
    assert f is not None and f.title == "the hop between processes takes 31% of request latency"
    assert f.severity == "high" and f.evidence["ipc_p50_ms"] == 12.5 and f.evidence["request_p50_ms"] == 40.0
    assert f.where == ("Connection._send",) and "shared memory" in f.hint


def _litserve_like_requests(collected: bool, roles: tuple = ((API, "litserve api"),  # type: ignore[no-untyped-def]
                                                               (WORKER, "litserve inference"))):
    """A snapshot's evidence of 32 requests followed into a worker by time (the unit tests of
    analysis/requests.py build the server), with the worker's batch collection timed or not;
    ``roles``: the processes' (pid, role)."""
    spans = [sp for sp in collecting_server() if collected or sp.stage != "queue"]
    req = summarize_requests(spans, 4.0, {API: API, WORKER: WORKER})

    class Snap:
        requests = req
        recent_requests = None
        processes = roles

    return ipc_of_requests(Snap())  # type: ignore[arg-type]


def test_behind_an_llm_engine_a_request_s_wait_is_the_engine_s_step_not_a_hop() -> None:
    """vLLM's API process waits for its engine core's steps (scheduling, prefill, decode):
    that wait is no hop between processes; ipc-heavy reads the samples' ipc instead."""
    assert _litserve_like_requests(False)["ipc_latency_share"] > 0.15
    engine = ((API, "vllm api"), (WORKER, "vllm engine core"), (WORKER + 1, "vllm model worker"))
    assert _litserve_like_requests(False, engine) == {}


def test_a_timed_batch_collection_is_no_hop() -> None:
    """Without the collection timed, the batch's wait reads as ipc (25 % of latency: the
    finding); with it, what is left is the way back and the encodes (~6 %)."""
    blind, seen = _litserve_like_requests(False), _litserve_like_requests(True)
    assert blind["ipc_latency_share"] > 0.15 > 0.08 > seen["ipc_latency_share"]
    assert fires("ipc-heavy", FindingInput(**blind)) and not fires("ipc-heavy", FindingInput(**seen))


def test_thresholds_are_overridable() -> None:
    inp = FindingInput(stage_shares={"preprocess": 0.2})
    assert not fires("preprocess-hot", inp)
    assert fires("preprocess-hot", inp, replace(TH, preprocess_hot_share=0.1))


@pytest.mark.parametrize("pageable_bytes,expected", [(0, False), (4096, True)])
def test_memcpy_pageable(pageable_bytes: int, expected: bool) -> None:
    rows = [MemcpyRow("HtoD", "pinned", 10, 10_000_000, 100.0)]
    if pageable_bytes:
        rows.append(MemcpyRow("HtoD", "pageable", 1, pageable_bytes, 10.0))
    assert fires("memcpy-pageable", FindingInput(gpu=gpu(memcpy=rows))) is expected


@pytest.mark.parametrize("blocked_us,expected", [(49_000, False), (50_000, True)])
def test_memcpy_sync_blocked_share(blocked_us: float, expected: bool) -> None:
    inp = FindingInput(wall_us=1e6, host_syncs={"cudaStreamSynchronize": (10, blocked_us)})
    assert fires("memcpy-sync", inp) is expected


def test_memcpy_sync_counts_item_calls() -> None:
    inp = FindingInput(wall_us=1e6, ops=(OpRow("aten::item", "cpu", 500, 200_000.0, 1000.0),))
    f = RULES["memcpy-sync"](inp, TH)
    assert f is not None and f.evidence["calls_per_s"] == 500.0


@pytest.mark.parametrize("small_fraction,per_s,expected", [(0.4, 1000, False), (0.6, 50, False), (0.6, 1000, True)])
def test_memcpy_small(small_fraction: float, per_s: int, expected: bool) -> None:
    n = per_s
    sizes = np.array([1024] * int(n * small_fraction) + [1 << 20] * (n - int(n * small_fraction)))
    assert fires("memcpy-small", FindingInput(wall_us=1e6, transfer_bytes=sizes)) is expected


@pytest.mark.parametrize("copy_us,expected", [(9_000, False), (10_000, True)])
def test_copy_heavy(copy_us: float, expected: bool) -> None:
    inp = FindingInput(
        ops=(OpRow("aten::copy_", "cpu", 100, copy_us, copy_us), OpRow("aten::mm", "cpu", 100, 90_000, 90_000)),
        outside_ops=OutsideOps(wall_us=120_000, in_ops_us=100_000, ops=200),
    )
    assert fires("copy-heavy", inp) is expected


@pytest.mark.parametrize("outside,ops,expected", [(0.29, 500, False), (0.31, 500, True), (0.9, 50, False)])
def test_python_overhead(outside: float, ops: int, expected: bool) -> None:
    inp = FindingInput(outside_ops=OutsideOps(wall_us=1e6, in_ops_us=(1 - outside) * 1e6, ops=ops))
    assert fires("python-overhead", inp) is expected


@pytest.mark.parametrize("busy,expected", [(0.49, True), (0.51, False)])
def test_tiny_ops_on_gpu(busy: float, expected: bool) -> None:
    k = np.array([5.0] * 80 + [50.0] * 20)
    assert fires("tiny-ops", FindingInput(gpu=gpu(busy=busy), kernel_durations_us=k)) is expected


def test_gpu_idle_busy_and_gaps() -> None:
    from infertop.trace.gpu import Gap

    assert not fires("gpu-idle", FindingInput(gpu=gpu(busy=0.5)))
    assert fires("gpu-idle", FindingInput(gpu=gpu(busy=0.49)))
    assert fires("gpu-idle", FindingInput(gpu=gpu(busy=0.9, gaps=[Gap(0, 0.0, 150_000.0)])))
    assert not fires("gpu-idle", FindingInput(gpu=gpu(busy=0.9, gaps=[Gap(0, 0.0, 90_000.0)])))


def _gc(share: float, max_ms: float, long_calls: float | None) -> GcSummary:
    line = PauseLine(10, 10 * max_ms / 2, max_ms / 2, max_ms, max_ms)
    return GcSummary(((2, line),), 10, line.total_ms, 100, share, max_ms, long_calls)


def test_gc_pauses_at_its_thresholds() -> None:
    # collections take 5 % of wall time: fires; 4.9 % with short pauses: does not
    assert fires("gc-pauses", FindingInput(gc=_gc(0.05, 20.0, 0.0)))
    assert not fires("gc-pauses", FindingInput(gc=_gc(0.049, 20.0, 0.0)))
    # a little GC time, but pauses of 100 ms landing in 1 % of calls: fires, and says so
    f = RULES["gc-pauses"](FindingInput(gc=_gc(0.01, 120.0, 0.01)), TH)
    assert f is not None and f.severity == "high" and "lands in 1.0% of calls" in f.title
    assert not fires("gc-pauses", FindingInput(gc=_gc(0.01, 120.0, 0.009)))  # too few calls hit
    assert not fires("gc-pauses", FindingInput(gc=_gc(0.01, 99.0, 0.5)))  # pauses too short
    assert not fires("gc-pauses", FindingInput())  # no agent: silent


def test_event_loop_lag_at_its_threshold() -> None:
    def lag(p99: float) -> LoopLagSummary:
        return LoopLagSummary(beats=100, loops=1, p50_ms=0.2, p99_ms=p99, max_ms=p99 * 1.2)

    assert fires("event-loop-lag", FindingInput(event_loop=lag(50.0)))
    assert not fires("event-loop-lag", FindingInput(event_loop=lag(49.9)))
    assert RULES["event-loop-lag"](FindingInput(event_loop=lag(200.0)), TH).severity == "high"


def test_queue_wait_and_gil() -> None:
    assert fires("queue-wait", FindingInput(queue_latency_share=0.3))
    assert not fires("queue-wait", FindingInput(queue_latency_share=0.29))
    assert fires("gil-contention", FindingInput(gil_wait_share=0.2))
    assert not fires("gil-contention", FindingInput(gil_wait_share=0.19))


def test_memory_pressure_and_fragmentation() -> None:
    gib = 1 << 30
    assert fires("gpu-memory-pressure", FindingInput(memory=MemoryState(80 * gib, 72 * gib, 70 * gib)))
    assert not fires("gpu-memory-pressure", FindingInput(memory=MemoryState(80 * gib, 71 * gib, 70 * gib)))
    assert fires("gpu-memory-pressure", FindingInput(memory=MemoryState(80 * gib, 10 * gib, 9 * gib, ooms=1)))
    assert fires("allocator-fragmentation", FindingInput(memory=MemoryState(80 * gib, 10 * gib, 7 * gib)))
    assert not fires("allocator-fragmentation", FindingInput(memory=MemoryState(80 * gib, 10 * gib, 7.5 * gib)))
    # 30 % of a small pool is less than 1 GiB: not worth a finding
    assert not fires("allocator-fragmentation", FindingInput(memory=MemoryState(80 * gib, gib, gib // 2)))


def test_severity_grows_with_magnitude() -> None:
    low = RULES["preprocess-hot"](FindingInput(stage_shares={"preprocess": 0.26}), TH)
    high = RULES["preprocess-hot"](FindingInput(stage_shares={"preprocess": 0.6}), TH)
    assert low and high and (low.severity, high.severity) == ("low", "high")


def test_a_stage_share_of_a_handful_of_samples_is_no_finding() -> None:
    few = FindingInput(stage_shares={"serialize": 1.0}, stage_samples={"serialize": 5})
    enough = FindingInput(stage_shares={"serialize": 1.0}, stage_samples={"serialize": 20})
    assert not fires("serialize-hot", few) and fires("serialize-hot", enough)
