"""`infertop export --format pprof | pprof-ops`: files the real `go tool pprof` reads, whose
totals and stage views agree with `infertop report`."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from support.go_pprof import needs_go
from support.go_pprof import pprof as _pprof
from support.go_pprof import traces as _traces
from support.recordings import MAIN, WORKER, definitions, sample_window

from infertop.cli import main
from infertop.model import pprof_schema as pb
from infertop.model.events import ProcessDef, ThreadDef
from infertop.record.writer import RecordingWriter
from tests.support import data

RECORDING = data.DATA / "recordings" / "textgen_service.infertop"
def _report(path: str) -> dict:
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["report", path, "--format", "json"]) == 0
    return json.loads(buf.getvalue())


def _decode(path: str):
    prof = pb.Profile()
    with open(path, "rb") as fh:
        prof.ParseFromString(gzip.decompress(fh.read()))
    return prof


def test_a_recording_exports_cpu_samples_with_stage_and_thread_labels(tmp_path) -> None:
    out = str(tmp_path / "cpu.pb.gz")
    assert main(["export", str(RECORDING), "--format", "pprof", "-o", out]) == 0
    prof = _decode(out)
    s = list(prof.string_table)
    assert [(s[t.type], s[t.unit]) for t in prof.sample_type] == [
        ("samples", "count"), ("cpu", "nanoseconds"),
    ]  # fmt: skip
    assert (s[prof.period_type.type], prof.period) == ("cpu", 20_000_000)  # 50 Hz
    rep = _report(str(RECORDING))
    assert prof.time_nanos == pytest.approx(rep["source"]["start_time"] * 1e9, abs=1e9)
    assert prof.duration_nanos / 1e9 == pytest.approx(rep["duration_s"], rel=0.05)
    stages: dict[str, int] = {}
    ns = 0
    for sample in prof.sample:
        labels = {s[lb.key]: s[lb.str] for lb in sample.label}
        assert set(labels) == {"stage", "thread"}  # one process: no process label
        assert re.match(r"^.+ \(\d+\)$", labels["thread"])
        stages[labels["stage"]] = stages.get(labels["stage"], 0) + sample.value[0]
        ns += sample.value[1]
    active = sum(n for st, n in stages.items() if st != "idle")
    assert active == rep["sampling"]["samples"]
    for st in rep["stages"]:
        assert stages.get(st["name"], 0) == st["cpu_samples"], st["name"]
    # true seconds: each sample is one period of its window
    assert ns / 1e9 == pytest.approx(sum(stages.values()) / rep["sampling"]["rate_hz"], rel=0.05)
    # one location per Python frame, with its file and line
    fn = {f.id: f for f in prof.function}
    lines = [(s[fn[ln.function_id].name], s[fn[ln.function_id].filename], ln.line)
             for loc in prof.location for ln in loc.line]  # fmt: skip
    assert all(len(loc.line) == 1 for loc in prof.location)
    assert any(f == "generate" and file.endswith(".py") and line > 0 for f, file, line in lines)


@needs_go
def test_go_tool_pprof_reads_it_and_its_stage_view_matches_the_report(tmp_path) -> None:
    out = str(tmp_path / "cpu.pb.gz")
    assert main(["export", str(RECORDING), "--format", "pprof", "-o", out]) == 0
    raw = _pprof("-raw", out)
    assert "PeriodType: cpu nanoseconds" in raw and "Duration: 8." in raw
    rep = _report(str(RECORDING))
    every = _traces(out, "-sample_index=samples", "-tagignore=stage=idle")
    total = sum(v for _l, v, _f in every)
    assert total == rep["sampling"]["samples"]
    forward = _traces(out, "-sample_index=samples", "-tagfocus=stage=forward")
    assert forward and all(lb["stage"] == "forward" for lb, _v, _f in forward)
    share = sum(v for _l, v, _f in forward) / total
    (fwd,) = [st for st in rep["stages"] if st["name"] == "forward"]
    assert share == pytest.approx(fwd["cpu_share"], abs=0.005)
    # stacks read root last, as pprof keeps them: the thread's bootstrap is the outermost frame
    assert all(frames[-1].endswith("_bootstrap") or frames[-1] == "<module>"
               for _l, _v, frames in every)  # fmt: skip


def _two_processes(path: str) -> None:
    ev = definitions()
    ev += [
        ProcessDef(4242, 1, "python serve.py --port 8000"),
        ProcessDef(4300, 4242, "python -c from multiprocessing.spawn import spawn_main"),
        ThreadDef(WORKER, "worker", pid=4300),
    ]
    ev[2:4] = [ThreadDef(MAIN, "MainThread", pid=4242)]
    from support.recordings import T0

    ev += [sample_window(T0 + i, ((MAIN, 0, 30), (WORKER, 1, 60))) for i in range(3)]
    w = RecordingWriter(path)
    w.write(ev)
    w.close()


def test_a_recording_of_several_processes_labels_each_sample_with_its_process(tmp_path) -> None:
    rec = str(tmp_path / "two.infertop")
    _two_processes(rec)
    out = str(tmp_path / "two.pb.gz")
    assert main(["export", rec, "--format", "pprof", "-o", out]) == 0
    prof = _decode(out)
    s = list(prof.string_table)
    by_process: dict[str, int] = {}
    for sample in prof.sample:
        labels = {s[lb.key]: s[lb.str] for lb in sample.label}
        by_process[labels["process"]] = by_process.get(labels["process"], 0) + sample.value[0]
    assert set(by_process) == {p for p in by_process if p.startswith(("pid 4242 ", "pid 4300 "))}
    assert sorted(by_process.values()) == [90, 180]
    rep = _report(rec)
    roles = {p["pid"]: p["role"] for p in rep["processes"]}
    assert by_process == {f"pid 4242 {roles[4242]}": 90, f"pid 4300 {roles[4300]}": 180}


@needs_go
@pytest.mark.parametrize("source", ["recording", "trace"])
def test_ops_profile_holds_op_paths_down_to_kernels(source: str, tmp_path) -> None:
    src = (
        str(RECORDING) if source == "recording"
        else str(data.trace("a100_alexnet_pageable_memcpy.json.gz"))
    )  # fmt: skip
    out = str(tmp_path / "ops.pb.gz")
    assert main(["export", src, "--format", "pprof-ops", "-o", out]) == 0
    prof = _decode(out)
    s = list(prof.string_table)
    assert [s[t.type] for t in prof.sample_type] == ["calls", "cpu_time", "device_time"]
    fn = {f.id: s[f.name] for f in prof.function}
    loc = {lc.id: fn[lc.line[0].function_id] for lc in prof.location}
    cpu = sum(x.value[1] for x in prof.sample)
    dev = sum(x.value[2] for x in prof.sample)
    if source == "recording":  # a CPU run: host time only
        assert cpu > 0 and dev == 0
        stacks = [[loc[i] for i in x.location_id] for x in prof.sample]
        assert ["aten::mm", "aten::matmul", "aten::linear"] in stacks  # leaf first
    else:  # the pageable copy under the op that made it, with its device time
        copies = [x for x in prof.sample if "Memcpy HtoD" in loc[x.location_id[0]]]
        assert copies and all(loc[x.location_id[-1]] == "aten::to" for x in copies)
        assert dev > 0
        raw = _pprof("-sample_index=device_time", "-tags", out)
        assert "cuda" in raw and "sync" in raw
    _pprof("-raw", out)  # the real reader takes it


def test_pprof_of_a_trace_is_its_ops_profile(tmp_path) -> None:
    trace = str(data.trace("a100_alexnet_pageable_memcpy.json.gz"))
    a, b = str(tmp_path / "a.pb.gz"), str(tmp_path / "b.pb.gz")
    assert main(["export", trace, "--format", "pprof", "-o", a]) == 0
    assert main(["export", trace, "--format", "pprof-ops", "-o", b]) == 0
    assert _decode(a) == _decode(b)


def test_diff_takes_a_pprof_as_its_baseline(tmp_path, capsys) -> None:
    """A baseline pulled from a profiling backend gates a fresh recording: the planted slow
    tokenizer is a preprocess regression against the plain service's exported profile."""
    base = str(tmp_path / "base.pb.gz")
    assert main(["export", str(RECORDING), "--format", "pprof", "-o", base]) == 0
    slow = str(data.DATA / "recordings" / "textgen_slow_tokenizer.infertop")
    capsys.readouterr()
    assert main(["diff", base, slow, "--fail-above", "10", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["base"]["kind"] == "pprof"
    rep = _report(str(RECORDING))
    rows = {r["name"]: r for r in doc["compared"] if r["what"] == "stage share (cpu)"}
    # the baseline's shares are the report's CPU shares of the recording it came from
    for st in rep["stages"]:
        if st["cpu_samples"]:
            assert rows[st["name"]]["base"] == pytest.approx(st["cpu_share"], abs=0.001)
    assert rows["preprocess"]["regressed"] and not rows["forward"]["regressed"]
    # the same baseline compared with itself: nothing moved
    capsys.readouterr()
    assert main(["diff", base, base, "--fail-above", "10"]) == 0


def test_diff_says_when_a_baseline_is_not_a_pprof(tmp_path, capsys) -> None:
    bad = tmp_path / "base.pb.gz"
    bad.write_bytes(gzip.compress(b"this is not a profile"))
    rc = main(["diff", str(bad), str(RECORDING)])
    err = capsys.readouterr().err
    assert rc == 5 and "is not a pprof profile" in err and "Traceback" not in err


def test_a_recording_without_samples_says_where_its_ops_are(tmp_path, capsys) -> None:
    rec = str(data.DATA / "recordings" / "ranks_a100_cpu.infertop")  # imported traces only
    assert main(["export", rec, "--format", "pprof", "-o", str(tmp_path / "p.pb.gz")]) == 0
    err = capsys.readouterr().err
    assert "no CPU samples" in err and "--format pprof-ops" in err
    ops = str(tmp_path / "o.pb.gz")
    assert main(["export", rec, "--format", "pprof-ops", "-o", ops]) == 0
    assert len(_decode(ops).sample) > 0


def test_ops_of_an_imported_rank_directory_are_labelled_by_rank(tmp_path) -> None:
    rec = str(data.DATA / "recordings" / "ranks_a100_cpu.infertop")
    out = str(tmp_path / "o.pb.gz")
    assert main(["export", rec, "--format", "pprof-ops", "-o", out]) == 0
    prof = _decode(out)
    s = list(prof.string_table)
    procs = {s[lb.str] for x in prof.sample for lb in x.label if s[lb.key] == "process"}
    assert {p.split(" ", 2)[2] for p in procs} == {"rank 0", "rank 34"}
