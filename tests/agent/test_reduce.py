"""The window reduction (payload.reduce_events), fed from synthetic events, from the real GPU
traces in tests/data/traces (through the same event tuples the agent builds from _KinetoEvent),
and from a real torch.profiler run in this process."""

from __future__ import annotations

import gzip
import json
import time
from collections import defaultdict

import pytest

from infertop.agent import payload as PL
from tests.support.data import trace

KINDS = PL.CPU_KINDS | PL.GPU_KINDS | PL.RUNTIME_KINDS | {"cuda_sync"}


def load_trace(name: str) -> dict:
    with gzip.open(trace(name), "rt") as fh:
        return json.load(fh)


def trace_events(doc: dict) -> list[tuple]:
    """Kineto trace JSON -> the agent's event tuples (what kineto_events() makes of
    _KinetoEvent objects): CPU ops carry their "External id"; runtime calls and GPU work carry
    the "External id" of the op that launched them as their link."""
    base = int(doc.get("baseTimeNanoseconds", 0) or 0)
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") not in KINDS:
            continue
        args = e.get("args") or {}
        kind = e["cat"]
        start = int(round(float(e["ts"]) * 1000)) + base
        dur = int(round(float(e.get("dur", 0)) * 1000))
        if kind in PL.CPU_KINDS:
            ident, link = int(args.get("External id", 0) or 0), 0
            shapes = None
            if "Input Dims" in args:
                shapes = PL.format_shapes(args["Input Dims"], args.get("Input type") or [])
        else:
            ident, link, shapes = int(args.get("correlation", 0) or 0), int(args.get("External id", 0) or 0), None
        out.append((kind, e["name"], e.get("tid"), start, dur, ident, link, int(args.get("bytes", 0) or 0), shapes))
    return out


def reduce_trace(doc: dict) -> tuple[dict, list[tuple]]:
    events = trace_events(doc)
    t0 = min(e[3] for e in events) / 1e9
    t1 = max(e[3] + e[4] for e in events) / 1e9
    return PL.reduce_events(events, t0, t1), events


def by_path(body: dict) -> dict:
    return {(tuple(p[0]), p[1], p[2]): p for p in body["paths"]}


# ---------------------------------------------------------------------------------------------
# synthetic events


def ev(kind, name, tid, start_us, dur_us, ident=0, link=0, nbytes=0, shapes=None):
    return (kind, name, tid, int(start_us * 1000), int(dur_us * 1000), ident, link, nbytes, shapes)


def test_nesting_self_time_and_threads():
    events = [
        ev("cpu_op", "A", 1, 0, 100, 1),
        ev("cpu_op", "B", 1, 10, 30, 2),
        ev("cpu_op", "C", 1, 50, 40, 3),
        ev("cpu_op", "D", 1, 60, 10, 4),
        ev("cpu_op", "A", 2, 20, 10, 5),  # same time, other thread: a root of its own
        ev("cpu_op", "E", 2, 25, 2, 6),
    ]
    body = PL.reduce_events(events, 0, 1e-3)
    rows = by_path(body)
    assert rows[(("A",), "forward", "cpu")][3:6] == [2, 110.0, 38.0]  # 30 self on t1, 8 on t2
    assert rows[(("A", "C"), "forward", "cpu")][3:6] == [1, 40.0, 30.0]
    assert rows[(("A", "C", "D"), "forward", "cpu")][3:6] == [1, 10.0, 10.0]
    assert rows[(("A", "E"), "forward", "cpu")][3:6] == [1, 2.0, 2.0]
    assert body["gpu"] is None and body["kernels"] == [] and body["memcpy"] == []


def test_annotations_give_stages():
    events = [
        ev("user_annotation", "infertop:preprocess", 1, 0, 100, 10),
        ev("user_annotation", "tokenize", 1, 5, 50, 11),  # a plain annotation inside: inherits
        ev("cpu_op", "aten::embedding", 1, 10, 20, 1),
        ev("cpu_op", "aten::mm", 1, 200, 20, 2),
        ev("user_annotation", "ProfilerStep#3", 2, 0, 300, 12),
        ev("cpu_op", "aten::add", 2, 10, 5, 3),
    ]
    body = PL.reduce_events(events, 0, 1e-3)
    rows = by_path(body)
    assert (("aten::embedding",), "preprocess", "cpu") in rows
    assert (("aten::mm",), "forward", "cpu") in rows
    assert (("aten::add",), "forward", "cpu") in rows
    names = [a[0] for a in body["annotations"]]  # sorted by start time
    assert sorted(names[:2]) == ["ProfilerStep#3", "infertop:preprocess"] and names[2] == "tokenize"
    ann = {a[0]: a for a in body["annotations"]}
    assert ann["ProfilerStep#3"][1] == 2
    assert ann["infertop:preprocess"][2:] == [0.0, pytest.approx(1e-4)]


def test_sync_ops_and_blocking_calls():
    events = [
        ev("cpu_op", "aten::item", 1, 0, 50, 1),
        ev("cpu_op", "aten::_local_scalar_dense", 1, 1, 48, 2),
        ev("cpu_op", "aten::linear", 1, 100, 100, 3),
        ev("cpu_op", "aten::to", 1, 110, 80, 4),
        ev("cpu_op", "aten::_to_copy", 1, 111, 78, 5),
        ev("cpu_op", "aten::copy_", 1, 112, 76, 6),
        ev("cuda_runtime", "cudaMemcpyAsync", 1, 113, 5, 900, 6),
        ev("cuda_runtime", "cudaStreamSynchronize", 1, 119, 60, 901, 6),
        ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 7, 118, 40, 900, 6, 4096),
    ]
    body = PL.reduce_events(events, 0, 1e-3)
    rows = by_path(body)
    assert (("aten::item",), "sync", "cpu") in rows
    assert (("aten::item", "aten::_local_scalar_dense"), "sync", "cpu") in rows
    assert (("aten::linear",), "forward", "cpu") in rows  # not a copy: does not inherit the wait
    for path in (("aten::linear", "aten::to"), ("aten::linear", "aten::to", "aten::_to_copy"),
                 ("aten::linear", "aten::to", "aten::_to_copy", "aten::copy_")):  # fmt: skip
        assert (path, "sync", "cpu") in rows
    leaf = rows[(("aten::linear", "aten::to", "aten::_to_copy", "aten::copy_", "Memcpy DtoH (Device -> Pageable)"), "sync", "cuda")]
    assert leaf[3:6] == [1, 40.0, 40.0]
    assert body["syncs"] == [["cudaStreamSynchronize", 1, 60.0]]
    assert body["memcpy"] == [["DtoH", "pageable", 1, 4096, 40.0]]
    assert body["kernels"] == [["Memcpy DtoH (Device -> Pageable)", "memory", 1, 40.0, 40.0, 40.0]]
    # on a CPU-only profile, .item() does not wait for any device
    cpu_only = PL.reduce_events(events[:2], 0, 1e-3, device_profiled=False)
    assert {p[1] for p in cpu_only["paths"]} == {"forward"}


def test_annotation_beats_sync():
    events = [
        ev("user_annotation", "infertop:postprocess", 1, 0, 100, 10),
        ev("cpu_op", "aten::item", 1, 10, 50, 1),
    ]
    body = PL.reduce_events(events, 0, 1e-3, device_profiled=True)
    assert body["paths"][0][1] == "postprocess"


def test_kernels_under_their_op_and_busy_time():
    events = [
        ev("cpu_op", "aten::mm", 1, 0, 10, 1),
        ev("cuda_runtime", "cudaLaunchKernel", 1, 2, 5, 100, 1),
        ev("kernel", "sgemm_128x64", 7, 20, 30, 100, 1),
        ev("kernel", "sgemm_128x64", 7, 60, 10, 101, 1),
        ev("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 9, 55, 30, 102, 0),
        ev("gpu_memset", "Memset (Device)", 7, 100, 2, 103, 0, 256),
    ]
    body = PL.reduce_events(events, 0, 200e-6)
    rows = by_path(body)
    assert rows[(("aten::mm", "sgemm_128x64"), "forward", "cuda")][3:6] == [2, 40.0, 40.0]
    assert (("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",), "forward", "cuda") in rows
    kinds = {k[0]: (k[1], k[2], k[3], k[4], k[5]) for k in body["kernels"]}
    assert kinds["sgemm_128x64"] == ("compute", 2, 40.0, 10.0, 30.0)
    assert kinds["Memset (Device)"][0] == "memory"
    assert kinds["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"][0] == "communication"
    assert body["memcpy"] == [["memset", "device", 1, 256, 2.0]]
    # union of [20,50] [55,85] [60,70] [100,102] = 30 + 30 + 2; gaps: 20 before, 5, 15, 98 after
    assert body["gpu"] == {"busy_us": 62.0, "span_us": 200.0, "max_gap_us": 98.0}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("Memcpy HtoD (Pageable -> Device)", ("HtoD", "pageable")),
        ("Memcpy HtoD (Pinned -> Device)", ("HtoD", "pinned")),
        ("Memcpy DtoH (Device -> Pageable)", ("DtoH", "pageable")),
        ("Memcpy DtoH (Device -> Pinned)", ("DtoH", "pinned")),
        ("Memcpy DtoD (Device -> Device)", ("DtoD", "device")),
        ("Memcpy PtoP (Device -> Device)", ("DtoD", "device")),
        ("Memcpy HtoH (Pinned -> Pageable)", ("HtoH", "pageable")),
        ("Memcpy HtoD (Managed -> Device)", ("HtoD", "unknown")),
        ("Memcpy DtoH", ("DtoH", "unknown")),
        ("Memset (Device)", ("memset", "device")),
        ("Memset (Unknown)", ("memset", "unknown")),
        ("void gemm_kernel<float>()", (None, None)),
    ],
)
def test_memcpy_kinds(name, expected):
    assert PL.memcpy_kind(name) == expected


def test_format_shapes():
    assert PL.format_shapes([[8, 64], [], [64]], ["float", "Scalar", "long int"]) == "float[8, 64], long int[64]"
    assert PL.format_shapes([[], []], ["Scalar", ""]) is None
    assert len(PL.format_shapes([[1] * 100], ["float"])) <= 96


# ---------------------------------------------------------------------------------------------
# real GPU traces


def kernel_sums(doc: dict) -> dict:
    sums = defaultdict(float)
    for e in doc["traceEvents"]:
        cat = e.get("cat")
        if cat == "kernel":
            sums["communication" if e["name"].lower().startswith("nccl") else "compute"] += float(e["dur"])
        elif cat in ("gpu_memcpy", "gpu_memset"):
            sums["memory"] += float(e["dur"])
    return sums


def check_kernel_sums(doc: dict, body: dict) -> None:
    want = kernel_sums(doc)
    got = defaultdict(float)
    for name, kind, count, total, lo, hi in body["kernels"]:
        got[kind] += total
        assert lo <= hi and count >= 1
    for kind in set(want) | set(got):
        assert got[kind] == pytest.approx(want[kind], rel=1e-6, abs=1.0), kind


def test_alexnet_trace_pageable_copies_and_syncs():
    doc = load_trace("a100_alexnet_pageable_memcpy.json.gz")
    body, events = reduce_trace(doc)
    memcpy = {(m[0], m[1]): m for m in body["memcpy"]}
    htod = memcpy[("HtoD", "pageable")]
    assert htod[2] == 16
    want_bytes = sum(e[7] for e in events if e[1] == "Memcpy HtoD (Pageable -> Device)")
    assert htod[3] == want_bytes > 0
    syncs = {s[0]: s for s in body["syncs"]}
    assert syncs["cudaStreamSynchronize"][1] == 16
    assert syncs["cudaDeviceSynchronize"][1] == 5
    assert syncs["Stream Sync"][1] == 16 and syncs["Context Sync"][1] == 5
    check_kernel_sums(doc, body)
    # the pageable copies hang under the op that issued them, which waited for them
    leaves = [p for p in body["paths"] if p[0][-1] == "Memcpy HtoD (Pageable -> Device)"]
    assert sum(p[3] for p in leaves) == 16
    assert all(p[2] == "cuda" and len(p[0]) >= 2 and p[0][-2] == "aten::copy_" for p in leaves)
    assert {p[1] for p in leaves} == {"sync"}
    g = body["gpu"]
    assert 0 < g["busy_us"] <= g["span_us"] and 0 <= g["max_gap_us"] <= g["span_us"]


def test_sampled_trace_copy_kinds_and_nccl():
    doc = load_trace("a100_sampled_rank0.json.gz")
    body, _ = reduce_trace(doc)
    kinds = {(m[0], m[1]) for m in body["memcpy"]}
    assert {("HtoD", "pageable"), ("DtoH", "pageable"), ("HtoD", "pinned"), ("DtoD", "device"), ("memset", "device")} <= kinds
    comm = [k for k in body["kernels"] if k[1] == "communication"]
    assert comm and all(k[0].lower().startswith("nccl") for k in comm)
    check_kernel_sums(doc, body)
    # shapes were recorded in this trace
    assert any(p[6] for p in body["paths"] if p[2] == "cpu")


def test_v100_trace_has_no_pageable_copies():
    doc = load_trace("v100_training_rank0.json.gz")
    body, _ = reduce_trace(doc)
    assert {m[1] for m in body["memcpy"]} == {"device"}
    assert {m[0] for m in body["memcpy"]} == {"DtoD", "memset"}
    check_kernel_sums(doc, body)


def test_cpu_only_trace():
    doc = load_trace("cpu_only_rank34.json.gz")
    body, _ = reduce_trace(doc)
    assert body["gpu"] is None and body["kernels"] == [] and body["memcpy"] == [] and body["syncs"] == []
    assert body["paths"] and {p[2] for p in body["paths"]} == {"cpu"}
    assert body["annotations"]


def test_large_trace_reduces_fast_and_fits_a_frame():
    doc = load_trace("a100_80gb_rank0.json.gz")
    events = trace_events(doc)
    t = time.perf_counter()
    body = PL.reduce_events(events, min(e[3] for e in events) / 1e9, max(e[3] + e[4] for e in events) / 1e9)
    elapsed = time.perf_counter() - t
    check_kernel_sums(doc, body)
    from infertop.agent import protocol

    assert len(protocol.encode_msg({"type": "window", **body})) < protocol.MAX_FRAME
    assert elapsed < 5.0, elapsed  # ~0.5 s here for ~67k events


# ---------------------------------------------------------------------------------------------
# real _KinetoEvent objects (CPU)


def test_kineto_events_from_a_real_profile():
    torch = pytest.importorskip("torch")
    prof = torch.autograd.profiler.profile(use_kineto=True, record_shapes=True)
    a = torch.randn(16, 32)
    b = torch.randn(32, 8)
    with prof:
        with torch.profiler.record_function("infertop:forward"):
            for _ in range(3):
                (a @ b).relu().sum().item()
    raw = prof.kineto_results.events()
    events = PL.kineto_events(raw, 100000, record_shapes=True)
    assert events and all(len(e) == 9 for e in events)
    now = time.time()
    assert all(abs(e[3] / 1e9 - now) < 60 for e in events)  # unix time
    body = PL.reduce_events(events, now - 1, now, device_profiled=False)
    rows = by_path(body)
    mm = rows[(("aten::matmul", "aten::mm"), "forward", "cpu")]
    assert mm[3] == 3 and mm[6] == "float[16, 32], float[32, 8]"
    assert [a[0] for a in body["annotations"]] == ["infertop:forward"]
    assert PL.kineto_events(raw, 5, False) and len(PL.kineto_events(raw, 5, False)) <= 5


class FakeKinetoEvent:
    """Stands in for torch's _KinetoEvent (same method names) to pin down the extraction."""

    def __init__(self, kind, name, start, dur, tid=7, corr=1, link=0, meta=""):
        self._v = (kind, name, start, dur, tid, corr, link, meta)

    def activity_type(self):
        return self._v[0]

    def name(self):
        return self._v[1]

    def start_ns(self):
        return self._v[2]

    def duration_ns(self):
        return self._v[3]

    def device_resource_id(self):
        return self._v[4]

    def correlation_id(self):
        return self._v[5]

    def linked_correlation_id(self):
        return self._v[6]

    def metadata_json(self):
        return self._v[7]

    def shapes(self):
        return [[2, 3]]

    def dtypes(self):
        return ["float"]


def test_kineto_events_clamps_unfinished_ops_and_reads_bytes():
    evs = [
        FakeKinetoEvent("cpu_op", "aten::mm", 1_000, 500),
        FakeKinetoEvent("cpu_op", "aten::still_running", 2_000, 2**64 - 1_000),  # wrapped around
        FakeKinetoEvent("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 3_000, 100, link=1,
                        meta='"device": 0, "bytes": 4096, "memory bandwidth (GB/s)": 1.0'),  # fmt: skip
        FakeKinetoEvent("python_function", "ignored", 0, 1),
    ]
    out = PL.kineto_events(evs, 100, record_shapes=True, end_ns=10_000)
    assert [e[1] for e in out] == ["aten::mm", "aten::still_running", "Memcpy HtoD (Pinned -> Device)"]
    assert out[0][4] == 500 and out[0][8] == "float[2, 3]"
    assert out[1][4] == 8_000
    assert out[2][7] == 4096 and out[2][6] == 1


@pytest.mark.slow  # in-process, but seconds long: not in make test-fast
def test_window_stop_removes_op_callbacks_before_finalising():
    """The agent's stop: after ``_remove_op_callbacks`` another thread's ops are no longer
    recorded (so none can be inside the profiler's per-thread queues while they are finalised),
    and torch's warning about toggling collection does not reach stderr."""
    import subprocess
    import sys

    code = r"""
import threading, time, torch
from infertop.agent.payload.kineto import _KinetoLog
from infertop.agent.payload.window import _remove_op_callbacks
with torch.profiler.profile():
    pass
stop = threading.Event()
done = [0]
def work():
    x = torch.randn(64, 64)
    while not stop.is_set():
        (x @ x).sum()
        done[0] += 1
t = threading.Thread(target=work); t.start()
cfg = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
log = _KinetoLog()
prof = torch.autograd.profiler.profile(use_kineto=True, experimental_config=cfg)
prof._prepare_trace(); level = log.quiet(); prof._start_trace()
# the worker runs at least 50 matmuls inside the window, however busy the machine
start, deadline = done[0], time.monotonic() + 60
while done[0] - start < 50 and time.monotonic() < deadline:
    time.sleep(0.01)
c10 = log.quiet_c10()
grace = _remove_op_callbacks(torch, prof)
removed_ns = time.time_ns()
time.sleep(0.2)  # the worker keeps running ops
prof.__exit__(None, None, None)
log.restore_c10(c10); log.restore(level)
stop.set(); t.join()
starts = [e.start_ns() for e in prof.kineto_results.events() if e.name() == "aten::mm"]
print(len(starts), sum(s > removed_ns for s in starts), grace)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    recorded, after, grace = r.stdout.split()
    assert int(recorded) >= 40  # the worker's ops were recorded during the window (50 ran)
    assert int(after) == 0  # and none that started after the callbacks were removed
    assert float(grace) > 0
    assert "Toggling" not in r.stderr and "RecordFunction" not in r.stderr, r.stderr
