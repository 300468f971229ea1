"""Ops analysis over hand-built profiler windows: the table, the device flame, GPU numbers,
the snapshot at a moment, and the report built from it."""

from __future__ import annotations

import json
import random

import pytest

from infertop.analysis.ops import (
    DEVICE_FILE,
    OpAccumulator,
    device_flame,
    gpu_work,
    merge_windows,
    ops_table,
)
from infertop.analysis.session import Session
from infertop.analysis.snapshot import build_snapshot
from infertop.model.events import (
    AllocatorReading,
    CollectorStatus,
    Frame,
    GpuActivity,
    KernelStat,
    MemcpyStat,
    OpPath,
    OpWindow,
    SyncStat,
    TargetInfo,
)
from infertop.report.build import build_report
from infertop.report.text import render_markdown, render_text
from tests.collect.ops_data import make_allocator, make_op_window

K = "ampere_sgemm_128x64_tn"
W1 = OpWindow(
    100.0, 100.5, "agent", 900, False,
    (
        OpPath(("aten::linear",), "forward", "cpu", 2, 100.0, 30.0, "[[8, 16], [32, 16]]"),
        OpPath(("aten::linear", "aten::addmm"), "forward", "cpu", 2, 70.0, 50.0),
        OpPath(("aten::linear", "aten::addmm", K), "forward", "cuda", 2, 200.0, 200.0),
        OpPath(("aten::item",), "sync", "cpu", 1, 20.0, 20.0),
    ),
    (KernelStat(K, "compute", 2, 200.0, 90.0, 110.0),
     KernelStat("ncclKernel_AllReduce", "communication", 1, 40.0, 40.0, 40.0),
     KernelStat("Memcpy HtoD (Pageable -> Device)", "memory", 1, 8.0, 8.0, 8.0)),
    (MemcpyStat("HtoD", "pageable", 1, 8_000_000, 8.0),),
    (SyncStat("cudaStreamSynchronize", 1, 300.0),),
    (),
    GpuActivity(248.0, 500.0, 200.0),
)  # fmt: skip
W2 = OpWindow(
    110.0, 110.5, "agent", 400, True,
    (
        OpPath(("aten::linear",), "forward", "cpu", 1, 50.0, 15.0, "[[8, 16], [32, 16]]"),
        OpPath(("aten::linear", "aten::addmm"), "forward", "cpu", 1, 35.0, 25.0),
        OpPath(("aten::linear", "aten::addmm", K), "forward", "cuda", 1, 100.0, 100.0),
    ),
    (KernelStat(K, "compute", 1, 100.0, 80.0, 100.0), KernelStat("odd", "graph", 1, 5.0, 5.0, 5.0)),
    (MemcpyStat("HtoD", "pageable", 1, 2_000_000, 2.0),),
    (SyncStat("cudaStreamSynchronize", 2, 100.0),),
    (),
    GpuActivity(105.0, 500.0, 350.0),
)  # fmt: skip


def paths(*windows: OpWindow) -> list[OpPath]:
    return merge_windows(windows).merged_paths()


def test_ops_table_sums_self_and_total_per_op_and_sorts_by_self() -> None:
    rows = ops_table(paths(W1, W2))
    by = {(r.name, r.stage): r for r in rows}
    lin, mm, k, item = (by[("aten::linear", "forward")], by[("aten::addmm", "forward")],
                        by[(K, "forward")], by[("aten::item", "sync")])  # fmt: skip
    assert (lin.count, lin.total_us, lin.self_us) == (3, 150.0, 45.0)
    assert (mm.count, mm.total_us, mm.self_us) == (3, 105.0, 75.0)
    assert (k.device, k.count, k.total_us, k.self_us) == ("cuda", 3, 300.0, 300.0)
    assert lin.mean_us == 50.0 and lin.shapes == "[[8, 16], [32, 16]]" and mm.shapes is None
    assert [r.name for r in rows] == [K, "aten::addmm", "aten::linear", "aten::item"]
    cpu_self = sum(p.self_us for p in paths(W1, W2) if p.device == "cpu")
    assert sum(r.self_us for r in rows if r.device == "cpu") == cpu_self == 140.0
    assert item.device == "cpu" and item.total_us == 20.0


def test_an_op_nested_in_itself_counts_its_total_once() -> None:
    w = OpWindow(0.0, 1.0, "agent", 2, False, (
        OpPath(("aten::to",), "forward", "cpu", 1, 50.0, 10.0),
        OpPath(("aten::to", "aten::to"), "forward", "cpu", 1, 40.0, 40.0),
    ))  # fmt: skip
    (row,) = ops_table(paths(w))
    assert (row.count, row.total_us, row.self_us) == (2, 50.0, 50.0)


def test_stage_filter_picks_one_stage() -> None:
    assert [r.name for r in ops_table(paths(W1), "sync")] == ["aten::item"]
    assert ops_table(paths(W1), "postprocess") == []


def test_device_flame_puts_kernels_under_their_op_and_weighs_in_us() -> None:
    root = device_flame(paths(W1, W2))
    assert root.total == 45 + 75 + 300 + 20
    lin = root.children[Frame("aten::linear", "", 0)]
    mm = lin.children[Frame("aten::addmm", "", 0)]
    (kernel,) = mm.children.values()
    assert kernel.frame == Frame(K, DEVICE_FILE, 0) and not kernel.children
    assert (lin.total, lin.self_count) == (420, 45)
    assert (mm.total, mm.self_count) == (375, 75)
    assert (kernel.total, kernel.self_count) == (300, 300)
    assert lin.stages == {"forward": 420} and root.stages == {"forward": 420, "sync": 20}
    sync_only = device_flame(paths(W1, W2), "sync")
    assert list(sync_only.children) == [Frame("aten::item", "", 0)] and sync_only.total == 20
    # total = self + children, everywhere
    stack = [root]
    while stack:
        node = stack.pop()
        assert node.total == node.self_count + sum(c.total for c in node.children.values())
        stack += node.children.values()


def test_gpu_work_kernel_time_by_kind_copies_syncs_and_busy_share() -> None:
    g = gpu_work(merge_windows([W1, W2]))
    assert g is not None
    assert g.kernel_time_us == {"compute": 305.0, "memory": 8.0, "communication": 40.0}
    (gemm, *_) = g.kernels
    assert (gemm.name, gemm.count, gemm.total_us, gemm.min_us, gemm.max_us) == (K, 3, 300.0, 80.0, 110.0)
    (copy,) = g.memcpy
    assert (copy.count, copy.bytes, copy.total_us) == (2, 10_000_000, 10.0)
    assert copy.mean_gbps == pytest.approx(1000.0)  # 10 MB in 10 µs
    assert g.syncs == (SyncStat("cudaStreamSynchronize", 3, 400.0),)
    assert g.busy_share == pytest.approx(353.0 / 1000.0) and g.max_gap_us == 350.0
    cpu_only = make_op_window(random.Random(1), 0.0, gpu=False)
    assert gpu_work(merge_windows([cpu_only])) is None


def test_accumulator_grows_and_starts_over_when_it_must() -> None:
    rng = random.Random(3)
    windows = [make_op_window(rng, 10.0 * i) for i in range(5)]
    acc = OpAccumulator()
    assert acc.upto(windows, 1, 2).windows == 2
    grown = acc.upto(windows, 1, 5)
    fresh = merge_windows(windows)
    assert grown.windows == 5 and grown.paths == fresh.paths and grown.kernels == fresh.kernels
    assert acc.upto(windows, 1, 3).paths == merge_windows(windows[:3]).paths  # shrank
    assert acc.upto(windows, 2, 1).windows == 1  # another session
    acc.upto(windows, 2, 3)
    changed = [windows[0], make_op_window(rng, 5.0), *windows[1:]]  # a late window, inserted
    assert acc.upto(changed, 2, 4).paths == merge_windows(changed[:4]).paths


def test_session_orders_windows_and_readings_and_merges_target_info() -> None:
    s = Session()
    assert (s.t_first, s.t_last) == (0.0, 0.0)
    s.apply(W2)
    s.apply(W1)  # late: still ordered by end time
    assert s.op_windows == [W1, W2] and (s.t_first, s.t_last) == (100.0, 110.5)
    assert s.op_windows_between(None, 105.0) == [W1] and s.op_windows_between(100.5, None) == [W2]
    r1, r2 = make_allocator(101.0, 1), make_allocator(100.2, 2)
    s.apply(r1)
    s.apply(r2)
    assert s.allocator == [r2, r1]
    assert s.allocator_at(100.0) is None and s.allocator_at(100.5) == r2 and s.allocator_at(None) == r1
    s.apply(TargetInfo(42, "python serve.py", "3.11.7", None, 99.0))
    s.apply(TargetInfo(None, torch="2.3.1"))
    assert s.target == TargetInfo(42, "python serve.py", "3.11.7", "2.3.1", 99.0)
    s.apply(TargetInfo(43, "python other.py"))  # another process: replaced
    assert s.target == TargetInfo(43, "python other.py")


def _session() -> Session:
    s = Session()
    s.apply(TargetInfo(42, "python serve.py", "3.11.7", "2.3.1", 99.0))
    for ev in (W1, W2, AllocatorReading(100.4, 0, 6 << 30, 9 << 30, 7 << 30, 2, 0),
               AllocatorReading(110.4, 0, 5 << 30, 9 << 30, 7 << 30, 3, 1)):  # fmt: skip
        s.apply(ev)
    return s


def test_snapshot_respects_t_and_the_stage_filter() -> None:
    s = _session()
    early = build_snapshot(s, t=105.0, stage_filter="sync")
    assert early.torch.windows == 1 and early.torch.seconds == 0.5 and early.torch.truncated == 0
    assert early.torch.allocator is not None and early.torch.allocator.alloc_retries == 2
    assert {r.stage for r in early.torch.ops} == {"forward", "sync"}  # the table keeps every stage
    assert early.torch.device_flame.total == 20  # the flame is filtered
    late = build_snapshot(s)
    assert late.torch.windows == 2 and late.torch.truncated == 1 and late.torch.allocator.ooms == 1
    assert late.torch.device_flame.total == 440 and late.torch.gpu is not None
    assert build_snapshot(s, t=100.0).torch.windows == 0
    assert build_snapshot(s, t=100.0).torch.gpu is None and build_snapshot(s, t=100.0).torch.ops == ()


def test_report_has_ops_gpu_numbers_and_memory() -> None:
    rep = build_report(build_snapshot(_session()), "recording", "x.infertop")
    json.dumps(rep)
    assert rep["ops"][0] == {
        "name": K, "device": "cuda", "count": 3, "total_us": 300.0, "self_us": 300.0,
        "stage": "forward", "mean_us": 100.0, "shapes": None,
    }  # fmt: skip
    for op in rep["ops"]:
        assert {"name", "device", "count", "total_us", "self_us"} <= set(op)
        assert op["device"] in ("cpu", "cuda") and isinstance(op["count"], int)
    g = rep["gpu"]
    assert g["available"] and g["reason"] is None
    assert g["kernel_time_us"] == {"compute": 305.0, "memory": 8.0, "communication": 40.0}
    assert g["busy_share"] == pytest.approx(0.353)
    assert g["memcpy"] == [{"kind": "HtoD", "host_memory": "pageable", "count": 2,
                            "bytes": 10_000_000, "total_us": 10.0, "mean_gbps": 1000.0}]  # fmt: skip
    assert g["memory"] == {"device": 0, "allocated": 5 << 30, "reserved": 9 << 30,
                           "peak_allocated": 7 << 30, "alloc_retries": 3, "ooms": 1,
                           # no NVML readings in this session: the device side is unknown
                           "nvml_device": None, "total": None, "used": None, "process": None,
                           "others": None, "free": None}  # fmt: skip
    assert rep["profiler"] == {"windows": 2, "seconds": 1.0, "truncated": 1}
    text = render_text(rep)
    assert "top torch ops by self time (2 torch-profiler windows, 1.0 s profiled, 1 cut short)" in text
    assert text.index("where the active time goes") < text.index("top torch ops") < text.index("hottest")
    assert "[forward] [cuda] ampere_sgemm_128x64_tn" in text and "1 OOMs" in text
    md = render_markdown(rep)
    assert "## Top torch ops" in md and "`aten::addmm`" in md and "busy 35.3%" in md


def test_report_without_op_windows_is_as_before() -> None:
    s = Session()
    s.apply(TargetInfo(42, "python serve.py", "3.11.7", None, 99.0))
    s.apply(CollectorStatus(99.0, "agent", "unavailable", "off (--no-inject)"))
    rep = build_report(build_snapshot(s), "recording", "x.infertop")
    assert rep["ops"] == [] and rep["gpu"]["memory"] is None and rep["gpu"]["memcpy"] == []
    assert rep["gpu"]["kernel_time_us"] == {"compute": 0.0, "memory": 0.0, "communication": 0.0}
    assert rep["gpu"]["busy_share"] is None and not rep["gpu"]["available"]
    assert "top torch ops" not in render_text(rep) and "Top torch ops" not in render_markdown(rep)
