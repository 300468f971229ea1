"""`infertop import`: Kineto traces become recordings that replay and report like the trace."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from infertop.analysis.snapshot import build_snapshot
from infertop.analysis.trace_ops import op_table
from infertop.config import Config
from infertop.model.events import OpWindow, ProcessDef
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from infertop.trace.table import read_trace
from tests.support import data
from tests.support.cli import Ran, run_cli


def trace(name: str) -> Path:
    return data.trace(f"{name}.json.gz")


def run(*args: str) -> Ran:
    return run_cli(*args)  # in this process: main([...])


def report(path: Path) -> dict:
    p = run("report", str(path), "--format", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def imported(name: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{name}.infertop"
    p = run("import", str(trace(name)), "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and f"-> {out}" in p.stderr
    return out


def by_kind(rows: list[dict]) -> dict[str, tuple[int, int, float]]:
    """memcpy rows summed per direction (memsets' host memory naming differs by reader)."""
    acc: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])
    for r in rows:
        a = acc[r["kind"] if r["kind"] == "memset" else f"{r['kind']} {r['host_memory']}"]
        a[0] += r["count"]
        a[1] += r["bytes"]
        a[2] += r["total_us"]
    return {k: (int(c), int(b), round(t, 1)) for k, (c, b, t) in acc.items()}


@pytest.mark.parametrize("name", ["a100_80gb_rank0", "a100_alexnet_pageable_memcpy", "v100_training_rank0"])
def test_the_imported_recording_reports_the_traces_gpu_numbers(name: str, tmp_path: Path) -> None:
    want = report(trace(name))["gpu"]
    got = report(imported(name, tmp_path))["gpu"]
    assert got["available"]
    for kind, us in want["kernel_time_us"].items():
        assert got["kernel_time_us"][kind] == pytest.approx(us, rel=1e-6, abs=0.01)
    assert got["busy_share"] == pytest.approx(want["busy_share"], abs=1e-4)
    assert by_kind(got["memcpy"]) == by_kind(want["memcpy"])


@pytest.mark.parametrize("name", ["a100_80gb_rank0", "v100_training_rank0", "cpu_only_rank34"])
def test_every_op_keeps_its_count_and_self_time(name: str, tmp_path: Path) -> None:
    rec = read_recording(str(imported(name, tmp_path)))
    src = ReplaySource(rec, Config())
    snap = build_snapshot(src.session, t=src.t)
    got: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for row in snap.torch.ops:  # the recording splits rows by stage: merge them
        got[(row.name, row.device)][0] += row.count
        got[(row.name, row.device)][1] += row.self_us
    want = op_table(read_trace(str(trace(name))))
    assert len(got) == len(want)
    for row in want:
        count, self_us = got[(row.name, row.device)]
        assert count == row.count, row.name
        # fractional-µs timestamps (V100) are read to the ns, and ties of equal start and
        # length may nest the other way: a few ns per call may move between ops
        assert self_us == pytest.approx(row.self_us, rel=0.03, abs=1.0), row.name
    total = sum(r.self_us for r in want)
    assert sum(s for _, s in got.values()) == pytest.approx(total, rel=1e-4)


def test_replay_plays_through_the_trace_step_by_step(tmp_path: Path) -> None:
    rec = read_recording(str(imported("v100_training_rank0", tmp_path)))
    windows = [e for e in rec.events if isinstance(e, OpWindow)]
    assert len(windows) >= 5  # five ProfilerStep#N: at least one window each
    assert all(w.source == "kineto" for w in windows)
    assert [w.t_start for w in windows] == sorted(w.t_start for w in windows)
    assert all(a.t_end <= b.t_start for a, b in zip(windows, windows[1:]))
    steps = sorted(a.name for w in windows for a in w.annotations if a.name.startswith("ProfilerStep#"))
    assert steps == [f"ProfilerStep#{n}" for n in range(101, 106)]  # each once
    src = ReplaySource(rec, Config())
    assert 0.45 < src.length < 0.55  # its events span 0.495 s; unix times kept
    end = build_snapshot(src.session, t=src.t)
    src.seek(src.length / 2)
    middle = build_snapshot(src.session, t=src.t)
    assert 0 < middle.torch.windows < end.torch.windows == len(windows)
    assert sum(r.count for r in middle.torch.ops) < sum(r.count for r in end.torch.ops)
    assert end.torch.device_flame.children and end.torch.gpu is not None


def test_the_alexnet_recording_raises_memcpy_pageable(tmp_path: Path) -> None:
    rules = [f["rule"] for f in report(imported("a100_alexnet_pageable_memcpy", tmp_path))["findings"]]
    assert "memcpy-pageable" in rules


def test_a_relative_time_trace_gets_unix_time_from_its_base(tmp_path: Path) -> None:
    rec = read_recording(str(imported("cpu_only_rank34", tmp_path)))
    w = next(e for e in rec.events if isinstance(e, OpWindow))
    assert 1.7e9 < w.t_start < 1.8e9  # baseTimeNanoseconds 1719853884 s + relative µs
    assert w.gpu is None and not w.kernels


def test_a_directory_of_ranks_imports_every_rank_as_a_process(tmp_path: Path) -> None:
    d = tmp_path / "ranks"
    d.mkdir()
    shutil.copy(trace("a100_alexnet_pageable_memcpy"), d / "rank10.json.gz")
    shutil.copy(trace("cpu_only_rank34"), d / "rank2.json.gz")
    out = tmp_path / "r.infertop"
    p = run("import", str(d), "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert "2 ranks, one process each" in p.stderr and "share its clock" in p.stderr
    rec = read_recording(str(out))
    procs = {e.pid: e.cmdline for e in rec.events if isinstance(e, ProcessDef)}
    # distributedInfo names ranks 0 and 34; the directory's natural order puts rank2 first
    assert sorted(procs.values()) == ["rank 0 (rank10.json.gz)", "rank 34 (rank2.json.gz)"]
    kernels = {e.pid for e in rec.events if isinstance(e, OpWindow) and e.kernels}
    assert [procs[p] for p in kernels] == ["rank 0 (rank10.json.gz)"]  # rank 34: CPU only


def _bad(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "name, data, needle",
    [
        ("garbage.json", b"\x00\x01 not json at all", "not valid JSON"),
        ("list.json", b"[1, 2, 3]", "not a torch.profiler trace"),
        ("nothing.json", json.dumps({"traceEvents": [{"ph": "M", "name": "x"}]}).encode(), "no torch.profiler events"),
        ("cut.json.gz", gzip.compress(b'{"traceEvents": [' * 50, mtime=0)[:40], "gzip"),
    ],
    ids=["garbage", "list", "nothing", "cut-gzip"],
)
def test_bad_input_is_one_line_and_exit_5(tmp_path: Path, name: str, data: bytes, needle: str) -> None:
    out = tmp_path / "out.infertop"
    p = run("import", str(_bad(tmp_path, name, data)), "-o", str(out))
    assert p.returncode == 5, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and p.stderr.startswith("infertop: ") and needle in p.stderr
    assert not out.exists()


def test_missing_trace_and_unwritable_output(tmp_path: Path) -> None:
    p = run("import", str(tmp_path / "nope.json"), "-o", str(tmp_path / "o.infertop"))
    assert p.returncode == 5 and "no such file" in p.stderr and "Traceback" not in p.stderr
    p = run("import", str(trace("cpu_only_rank34")), "-o", str(tmp_path / "no" / "dir" / "o.infertop"))
    assert p.returncode == 2 and "cannot write" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "name",
    ["a100_80gb_rank0", "a100_sampled_rank0", "v100_training_rank0", "cpu_only_rank34",
     "a100_alexnet_pageable_memcpy"],
)
def test_the_recording_raises_the_traces_findings(name: str, tmp_path: Path) -> None:
    """Windows keep copies as per-kind totals, not one size per copy: memcpy-small, which
    needs the sizes' spread, is the one rule a recording cannot judge as the trace does."""
    want = {f["rule"]: f for f in report(trace(name))["findings"] if f["rule"] != "memcpy-small"}
    got = {f["rule"]: f for f in report(imported(name, tmp_path))["findings"]}
    assert set(got) == set(want)
    if "python-overhead" in want:  # each ProfilerStep#N is one window, measured the same way
        share = want["python-overhead"]["evidence"]["outside_share"]
        assert got["python-overhead"]["evidence"]["outside_share"] == pytest.approx(share, abs=1e-3)


def test_the_text_report_of_an_imported_trace_leads_with_its_findings(tmp_path: Path) -> None:
    p = run("report", str(imported("a100_alexnet_pageable_memcpy", tmp_path)))
    assert p.returncode == 0, p.stderr
    text = p.stdout
    assert text.index("findings:") < text.index("where the active time goes") < text.index("top torch ops")
    assert "[high] memcpy-pageable" in text and "(no Python samples in this recording)" in text


def _op(name: str, ts: float, dur: float, **kw: object) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, **kw}


def test_odd_values_in_a_trace_are_left_out_quietly(tmp_path: Path) -> None:
    events = [
        _op("aten::mm", 1000.0, 50.0, args={"External id": 1}),
        _op("aten::add", 1100.0, 5.0, pid=10**20, args={"correlation": 10**20, "External id": "x"}),
        _op("aten::bad", 1200.0, -3.0),  # negative duration: left out
        _op(["not", "a", "name"], 1300.0, 1.0),  # not a name: left out
    ]
    path = _bad(tmp_path, "odd.json", json.dumps({"traceEvents": events}).encode())
    out = tmp_path / "odd.infertop"
    p = run("import", str(path), "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert "Warning" not in p.stderr and "Traceback" not in p.stderr
    windows = [w for w in read_recording(str(out)).events if isinstance(w, OpWindow)]
    assert {path.names[-1] for w in windows for path in w.paths} == {"aten::mm", "aten::add"}


def test_a_trace_spanning_weeks_is_refused(tmp_path: Path) -> None:
    events = [_op("aten::mm", 0.0, 5.0), _op("aten::mm", 2e12, 5.0)]
    path = _bad(tmp_path, "weeks.json", json.dumps({"traceEvents": events}).encode())
    p = run("import", str(path), "-o", str(tmp_path / "w.infertop"))
    assert p.returncode == 5 and "11 days" in p.stderr and "Traceback" not in p.stderr
