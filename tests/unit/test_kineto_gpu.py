"""Kineto reading and the GPU breakdown, on the real A100/V100 traces in tests/data/traces."""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter, defaultdict

import pytest

from infertop.errors import BadInputFile
from infertop.trace.gpu import memcpy_kind, summarize_gpu
from infertop.trace.table import parse_trace, read_trace
from tests.support import data

TRACES = data.TRACES
NAMES = [
    "a100_alexnet_pageable_memcpy",
    "a100_sampled_rank0",
    "a100_80gb_rank0",
    "v100_training_rank0",
    "cpu_only_rank34",
]


def plain_sums(name: str) -> tuple[dict[str, float], Counter, dict]:
    """The README's definitions, computed the simplest way: one loop over the JSON."""
    doc = json.load(gzip.open(TRACES / f"{name}.json.gz"))
    kinds = {"compute": 0.0, "memory": 0.0, "communication": 0.0}
    copies: Counter = Counter()
    nbytes: dict = defaultdict(int)
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        cat, nm = e.get("cat"), e.get("name", "")
        if cat == "kernel":
            kinds["communication" if nm.lower().startswith("nccl") else "compute"] += e["dur"]
        elif cat in ("gpu_memcpy", "gpu_memset"):
            kinds["memory"] += e["dur"]
            copies[nm] += 1
            nbytes[nm] += e.get("args", {}).get("bytes", 0)
    return kinds, copies, nbytes


@pytest.mark.parametrize("name", NAMES)
def test_kernel_time_by_kind_equals_the_plain_sums(name: str) -> None:
    expected, _, _ = plain_sums(name)
    got = summarize_gpu(read_trace(str(TRACES / f"{name}.json.gz"))).kernel_time_us
    for kind, value in expected.items():
        assert got[kind] == pytest.approx(value, rel=0.005, abs=1e-6), kind


@pytest.mark.parametrize("name", NAMES)
def test_memcpy_counts_and_bytes_are_exact_by_direction_and_memory_kind(name: str) -> None:
    _, copies, nbytes = plain_sums(name)
    expected_count: Counter = Counter()
    expected_bytes: Counter = Counter()
    for nm, n in copies.items():
        expected_count[memcpy_kind(nm)] += n
        expected_bytes[memcpy_kind(nm)] += nbytes[nm]
    rows = summarize_gpu(read_trace(str(TRACES / f"{name}.json.gz"))).memcpy
    assert {(r.kind, r.host_memory): r.count for r in rows} == dict(expected_count)
    assert {(r.kind, r.host_memory): r.bytes for r in rows} == dict(expected_bytes)


def test_memcpy_names() -> None:
    assert memcpy_kind("Memcpy HtoD (Pageable -> Device)") == ("HtoD", "pageable")
    assert memcpy_kind("Memcpy DtoH (Device -> Pinned)") == ("DtoH", "pinned")
    assert memcpy_kind("Memcpy DtoD (Device -> Device)") == ("DtoD", "device")
    assert memcpy_kind("Memset (Device)") == ("memset", "device")
    assert memcpy_kind("Memcpy PtoP (Device -> Device)") == ("DtoD", "device")


def test_alexnet_pageable_copies_and_idle_gpu() -> None:
    s = summarize_gpu(read_trace(str(TRACES / "a100_alexnet_pageable_memcpy.json.gz")))
    pageable = [r for r in s.memcpy if r.host_memory == "pageable"]
    assert sum(r.count for r in pageable) == 16
    assert s.sync_events > 0
    assert s.busy_share is not None and s.busy_share < 0.5


def test_cpu_only_trace_has_no_gpu() -> None:
    tr = read_trace(str(TRACES / "cpu_only_rank34.json.gz"))
    assert not tr.has_gpu and tr.rank == 34
    s = summarize_gpu(tr)
    assert s.busy_share is None and s.memcpy == () and s.launch_delay_us is None


@pytest.mark.parametrize(
    "doc", [[], {}, {"traceEvents": 3}, "x", None, {"traceEvents": None}]
)
def test_not_a_trace_is_bad_input(doc) -> None:
    with pytest.raises(BadInputFile):
        parse_trace(doc)


def test_truncated_and_mutated_traces_never_traceback(tmp_path) -> None:
    raw = gzip.decompress((TRACES / "a100_alexnet_pageable_memcpy.json.gz").read_bytes())
    rnd = random.Random(7)
    for i in range(60):
        cut = raw[: rnd.randrange(len(raw))] if i % 2 else bytearray(raw)
        if not i % 2:
            for _ in range(20):
                cut[rnd.randrange(len(cut))] = rnd.randrange(256)
        p = tmp_path / f"t{i}.json"
        p.write_bytes(bytes(cut))
        try:
            summarize_gpu(read_trace(str(p)))
        except BadInputFile:
            pass
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes((TRACES / "a100_sampled_rank0.json.gz").read_bytes()[:5000])
    with pytest.raises(BadInputFile):
        read_trace(str(gz))


def test_malformed_events_are_skipped_and_counted() -> None:
    doc = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 5},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 5},
        {"ph": "X", "cat": "kernel", "name": 3, "ts": 1, "dur": 5},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 2, "dur": -1},
        "junk",
    ]}  # fmt: skip
    tr = parse_trace(doc)
    assert len(tr) == 1 and tr.skipped == 3
