"""`infertop export`: Chrome traces that viewers load whole, and speedscope profiles."""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
from support.chrome_trace import load, validate
from support.recordings import (
    MAIN,
    WORKER,
    definitions,
    sample_window,
    write_session,
)

from infertop.cli import main
from infertop.export.run import export
from infertop.record.writer import RecordingWriter
from infertop.trace.table import CAT, read_trace
from tests.support import data
from tests.support.cli import run_cli

TRACES = data.TRACES
SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures/export/speedscope-schema.json").read_text()
)
GPU_TRACES = data.gpu_traces()


def _events(path: str) -> list[dict]:
    return load(path)["traceEvents"]


def _slices(events: list[dict], tid: int) -> list[tuple[float, float, str]]:
    """(start, end, name) of the B/E and X slices on one track of the target's process."""
    out, stack = [], []
    for e in events:
        if e.get("tid") != tid or e.get("pid") != 4242:
            continue
        if e["ph"] == "B":
            stack.append(e)
        elif e["ph"] == "E":
            b = stack.pop()
            out.append((b["ts"], e["ts"], b["name"]))
        elif e["ph"] == "X":
            out.append((e["ts"], e["ts"] + e["dur"], e["name"]))
    return out


def test_a_recording_exports_to_a_valid_trace_with_every_track(tmp_path) -> None:
    rec = write_session(str(tmp_path / "s.infertop"))
    out = str(tmp_path / "s.json")
    assert main(["export", rec, "--format", "chrome", "-o", out]) == 0
    doc = load(out)
    rep = validate(doc)
    assert rep.problems == []
    names = set(rep.names.values())
    assert {
        "MainThread",
        "worker",
        "stage · MainThread",
        "stage calls · MainThread",
        "GPU",
    } <= names
    assert any(n.startswith("annotations · MainThread") for n in names)
    ev = doc["traceEvents"]
    frames = {e["name"] for e in ev if e.get("cat") == "python"}
    assert {"serve", "encode", "forward", "dumps", "Condition.wait"} <= frames
    stages = {e["name"] for e in ev if e.get("cat") == "stage"}
    assert {"preprocess", "forward", "serialize", "queue"} <= stages
    # torch ops, the kernel and copy they launched (on the GPU process), arrows between them
    ops = {e["name"] for e in ev if e.get("cat") == "torch op"}
    assert {"aten::linear", "aten::addmm", "aten::to", "aten::copy_"} <= ops
    kernels = [e for e in ev if e.get("cat") == "gpu kernel"]
    copies = [e for e in ev if e.get("cat") == "gpu copy"]
    assert {e["name"] for e in kernels} == {"sm80_xmma_gemm"} and len(kernels) == 3  # 3 op windows
    assert {e["name"] for e in copies} == {"Memcpy HtoD (Pageable -> Device)"}
    assert sum(1 for e in ev if e["ph"] == "f") == 6 == sum(1 for e in ev if e["ph"] == "s")
    counters = {e["name"] for e in ev if e["ph"] == "C"}
    assert {
        "GPU0 utilization (%)",
        "GPU0 memory (MiB)",
        "CUDA allocator cuda:0 (MiB)",
        "threads by stage",
    } <= counters
    findings = {e["args"]["rule"] for e in ev if e.get("cat") == "finding"}
    assert "memcpy-pageable" in findings
    assert any(e["ph"] == "i" and e["name"] == "recording started" for e in ev)
    assert doc["otherData"]["kind"] == "recording"


def test_sample_slices_are_as_long_as_their_samples_and_identical_stacks_merge(tmp_path) -> None:
    rec = str(tmp_path / "m.infertop")
    w = RecordingWriter(rec)
    w.write(definitions())
    # three back-to-back windows where the worker is always in the same stack, 100 ticks each
    for k in range(3):
        w.write(
            [sample_window(1_700_000_000.0 + k, ((WORKER, 3, 100), (MAIN, 0, 30), (MAIN, 1, 10)))]
        )
    w.close()
    out = str(tmp_path / "m.json")
    export(rec, "chrome", out)
    ev = _events(out)
    worker = _slices(ev, WORKER)
    assert sorted(n for _, _, n in worker) == ["Condition.wait", "Queue.get", "run"]  # one each
    assert all(e - s == pytest.approx(3_000_000, abs=1) for s, e, _ in worker)  # 3 s, µs
    main_slices = _slices(ev, MAIN)
    encode = [e - s for s, e, n in main_slices if n == "encode"]
    forward = [e - s for s, e, n in main_slices if n == "forward"]
    assert encode == [pytest.approx(300_000, abs=1)] * 3  # 30 samples of 10 ms per window
    assert forward == [pytest.approx(100_000, abs=1)] * 3
    assert validate(load(out)).problems == []


def test_overlapping_ranges_go_to_lanes_and_nothing_is_lost(tmp_path) -> None:
    rec = write_session(str(tmp_path / "s.infertop"), seconds=3)
    out = str(tmp_path / "s.json")
    export(rec, "chrome", out)
    ev = _events(out)
    calls = Counter(e["name"] for e in ev if e.get("cat") == "stage call")
    assert calls == {"preprocess": 3, "forward": 3, "request": 3, "batch": 3}
    # "batch" overlaps "forward" without nesting: it sits on a second track of the thread
    batch_tids = {e["tid"] for e in ev if e.get("name") == "batch"}
    forward_tids = {e["tid"] for e in ev if e.get("cat") == "stage call" and e["name"] == "forward"}
    assert batch_tids.isdisjoint(forward_tids)
    annotations = Counter(e["name"] for e in ev if e.get("cat") == "annotation")
    assert annotations == {"ProfilerStep#1": 2, "ProfilerStep#2": 2, "my_region": 2}
    assert validate(load(out)).problems == []


def test_each_gpu_s_counters_are_with_the_process_that_uses_it(tmp_path) -> None:
    """``--children``: a router without a GPU, two workers on a GPU each, and a process outside
    the session holding more of GPU 1 than its worker. Each GPU's NVML counters are in its
    worker's GPU group, the router's ``GPU`` group has none."""
    from infertop.model.events import ProcessDef
    from infertop.model.gpu import GpuDeviceReading, GpuReading

    w = RecordingWriter(str(tmp_path / "tree.infertop"))
    w.write(definitions() + [ProcessDef(4242, 0, "python router.py"), ProcessDef(5001, 4242, "python worker.py 0"),
                             ProcessDef(5002, 4242, "python worker.py 1")])  # fmt: skip
    t = definitions()[0].started
    for k in range(4):
        w.write([sample_window(t + k, ((MAIN, 1, 50),)), GpuReading(t + k + 0.5, (
            GpuDeviceReading(0, "NVIDIA A100", memory_used=9 << 30, util_gpu=40.0,
                             processes=((5001, 8 << 30),) if k else ()),  # the worker comes late
            GpuDeviceReading(1, "NVIDIA A100", memory_used=30 << 30, util_gpu=70.0,
                             processes=((5002, 4 << 30), (9999, 20 << 30))),
        ))])  # fmt: skip
    w.close()
    out = str(tmp_path / "tree.json")
    export(str(tmp_path / "tree.infertop"), "chrome", out)
    events = _events(out)
    assert validate(load(out)).problems == []
    groups = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    util = [(e["name"].split()[0], groups[e["pid"]]) for e in events
            if e.get("ph") == "C" and e["name"].endswith("utilization (%)")]  # fmt: skip
    assert set(util) == {("GPU0", "GPU · pid 5001"), ("GPU1", "GPU · pid 5002")}
    assert len(util) == 8  # every reading, the one before the worker held memory too
    assert groups[5001] == "python worker.py 0 (pid 5001)"


def test_gzip_when_the_name_ends_in_gz(tmp_path) -> None:
    rec = write_session(str(tmp_path / "s.infertop"), seconds=2)
    plain, packed = str(tmp_path / "t.json"), str(tmp_path / "t.json.gz")
    export(rec, "chrome", plain)
    export(rec, "chrome", packed)
    assert Path(packed).read_bytes()[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(Path(packed).read_bytes())) == json.loads(
        Path(plain).read_text()
    )
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".infertop-export")]


#: the whole 109k-event A100 and the V100 trace take ~20 s each here: with the full suite only
_HEAVY = ("a100_80gb_rank0.json.gz", "v100_training_rank0.json.gz")


@pytest.mark.parametrize(
    "trace",
    [pytest.param(t, marks=pytest.mark.slow) if t.name in _HEAVY else t for t in GPU_TRACES],
    ids=lambda p: p.name,
)
def test_kineto_traces_export_whole_and_valid(trace: Path, tmp_path) -> None:
    out = str(tmp_path / "k.json.gz")
    assert main(["export", str(trace), "--format", "chrome", "-o", out]) == 0
    rep = validate(load(out))
    assert rep.problems == []
    t = read_trace(str(trace))
    ev = _events(out)
    # every kernel, copy and op of the trace is there (overlaps moved to lanes, not dropped)
    for cat in ("kernel", "gpu_memcpy", "cpu_op"):
        assert sum(1 for e in ev if e.get("cat") == cat) == int((t.cat == CAT[cat]).sum())
    launched = int(((t.cat == CAT["kernel"]) & (t.correlation >= 0)).sum())
    if launched:
        assert (
            0
            < sum(1 for e in ev if e["ph"] == "f")
            <= launched
            + int((t.cat == CAT["gpu_memcpy"]).sum())
            + int((t.cat == CAT["gpu_memset"]).sum())
        )


def test_kineto_findings_are_instant_events(tmp_path) -> None:
    out = str(tmp_path / "k.json")
    export(str(TRACES / "a100_alexnet_pageable_memcpy.json.gz"), "chrome", out)
    rules = {e["args"]["rule"] for e in _events(out) if e.get("cat") == "finding"}
    assert "memcpy-pageable" in rules
    out2 = str(tmp_path / "v.json")
    export(str(TRACES / "v100_training_rank0.json.gz"), "chrome", out2)
    assert "memcpy-pageable" not in {
        e["args"]["rule"] for e in _events(out2) if e.get("cat") == "finding"
    }


def test_the_validator_catches_what_viewers_reject() -> None:
    base = [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "t"}}]
    bad = {
        "overlap": [
            {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "a"},
            {"ph": "X", "pid": 1, "tid": 1, "ts": 5, "dur": 10, "name": "b"},
        ],
        "unbalanced": [{"ph": "B", "pid": 1, "tid": 1, "ts": 0, "name": "a"}],
        "stray end": [{"ph": "E", "pid": 1, "tid": 1, "ts": 3}],
        "string ts": [{"ph": "X", "pid": 1, "tid": 1, "ts": "0", "dur": 1, "name": "a"}],
        "counter text": [{"ph": "C", "pid": 1, "ts": 0, "name": "c", "args": {"v": "high"}}],
        "metadata": [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {}}],
        "lonely flow": [{"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 0, "cat": "x", "name": "y"}],
        "flow off its slices": [
            {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "a"},
            {"ph": "X", "pid": 1, "tid": 1, "ts": 2, "dur": 3, "name": "inner"},
            {"ph": "s", "id": 2, "pid": 1, "tid": 1, "ts": 10, "cat": "x", "name": "y"},  # a's end
            {"ph": "f", "id": 2, "pid": 1, "tid": 1, "ts": 4, "bp": "e", "cat": "x", "name": "y"},
        ],
    }
    for what, events in bad.items():
        assert validate({"traceEvents": base + events}).problems, what
    ok = [
        {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "a"},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "same"},
        {"ph": "B", "pid": 1, "tid": 1, "ts": 2, "name": "b"},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 4},
        # a flow from inside a nested slice to a zero-length slice on another track
        {"ph": "X", "pid": 1, "tid": 2, "ts": 30, "dur": 0, "name": "z"},
        {"ph": "s", "id": 3, "pid": 1, "tid": 1, "ts": 3, "cat": "x", "name": "y"},
        {"ph": "f", "id": 3, "pid": 1, "tid": 2, "ts": 30, "bp": "e", "cat": "x", "name": "y"},
    ]
    assert validate({"traceEvents": base + ok}).problems == []


def _speedscope_semantics(doc: dict) -> None:
    """What the schema cannot say: indexes in range, one weight per sample, balanced events."""
    n = len(doc["shared"]["frames"])
    for p in doc["profiles"]:
        assert p["endValue"] >= p["startValue"]
        if p["type"] == "sampled":
            assert len(p["samples"]) == len(p["weights"]) > 0
            assert all(0 <= f < n for s in p["samples"] for f in s)
        else:
            stack, last = [], float("-inf")
            for e in p["events"]:
                assert e["at"] >= last and 0 <= e["frame"] < n
                last = e["at"]
                if e["type"] == "O":
                    stack.append(e["frame"])
                else:
                    assert stack.pop() == e["frame"]
            assert not stack


def test_speedscope_profiles_per_thread_and_per_stage(tmp_path) -> None:
    rec = write_session(str(tmp_path / "s.infertop"), seconds=4)
    out = str(tmp_path / "s.speedscope.json")
    assert main(["export", rec, "--format", "speedscope", "-o", out]) == 0
    doc = json.loads(Path(out).read_text())
    jsonschema.validate(doc, SCHEMA)
    _speedscope_semantics(doc)
    profiles = {p["name"]: p for p in doc["profiles"]}
    assert {
        "thread MainThread (101)",
        "thread worker (102)",
        "stage preprocess",
        "stage forward",
        "stage serialize",
        "stage queue",
    } <= set(profiles)
    # 4 windows × 20 encode samples × 10 ms
    assert profiles["stage preprocess"]["endValue"] == pytest.approx(800.0)
    # the worker's one stack over 4 windows is one merged sample
    assert profiles["thread worker (102)"]["samples"] == [[5, 6, 7]]
    assert profiles["thread worker (102)"]["weights"] == [pytest.approx(3600.0)]


@pytest.mark.parametrize(
    "trace", ["a100_alexnet_pageable_memcpy.json.gz", "cpu_only_rank34.json.gz"]
)
def test_speedscope_from_a_kineto_trace(trace: str, tmp_path) -> None:
    out = str(tmp_path / "k.speedscope.json")
    export(str(TRACES / trace), "speedscope", out)
    doc = json.loads(Path(out).read_text())
    jsonschema.validate(doc, SCHEMA)
    _speedscope_semantics(doc)
    assert doc["profiles"] and all(p["type"] == "evented" for p in doc["profiles"])


def test_export_errors_are_one_line_with_the_right_code(tmp_path) -> None:
    junk = tmp_path / "junk.infertop"
    junk.write_bytes(b"not a recording at all")
    p = run_cli("export", str(junk), "--format", "chrome", "-o", str(tmp_path / "o.json"))
    assert (
        p.returncode == 5
        and "not an infertop recording" in p.stderr
        and "Traceback" not in p.stderr
    )
    rec = write_session(str(tmp_path / "s.infertop"), seconds=1)
    p = run_cli("export", rec, "--format", "chrome", "-o", str(tmp_path / "no/such/dir/o.json"))
    assert p.returncode == 2 and "cannot write" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("export", rec, "--format", "chrome", "-o", rec)
    assert p.returncode == 2 and "overwrite" in p.stderr
    assert os.path.getsize(rec) > 100  # untouched


def test_a_damaged_recording_exports_up_to_the_damage(tmp_path) -> None:
    rec = write_session(str(tmp_path / "s.infertop"), seconds=4)
    data = Path(rec).read_bytes()
    Path(rec).write_bytes(data[:-30])
    out = str(tmp_path / "d.json")
    res = export(rec, "chrome", out)
    assert res.warning and "byte" in res.warning
    doc = load(out)
    assert validate(doc).problems == [] and "warning" in doc["otherData"]
    assert any(e.get("cat") == "python" for e in doc["traceEvents"])


@pytest.mark.slow  # two exports of a long session, measured: ~10 s (with the full suite only)
@pytest.mark.parametrize("fmt,name", [("chrome", "t.json.gz"), ("speedscope", "t.speedscope.json")])
def test_memory_does_not_grow_with_the_number_of_events(fmt: str, name: str, tmp_path) -> None:
    import tracemalloc

    from support.recordings import write_busy

    peaks, sizes = [], []
    for windows in (40, 160):
        rec = write_busy(str(tmp_path / f"b{windows}.infertop"), windows)
        out = str(tmp_path / f"{windows}-{name}")
        tracemalloc.start()
        try:
            res = export(rec, fmt, out)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        sizes.append((res.events, os.path.getsize(out)))
    assert sizes[1][0] >= 3.5 * sizes[0][0]  # four times the input, four times the events ...
    assert peaks[1] < 1.25 * peaks[0] + 256 * 1024, (peaks, sizes)  # ... the same memory


def _kernel_time(path: str) -> dict[str, float]:
    from infertop.trace.gpu import summarize_gpu

    return summarize_gpu(read_trace(path)).kernel_time_us


def test_kineto_export_round_trips_device_time_copies_and_steps(tmp_path) -> None:
    rec = write_session(str(tmp_path / "s.infertop"), seconds=5)  # 3 op windows
    out = str(tmp_path / "s.pt.trace.json.gz")
    assert main(["export", rec, "--format", "kineto", "-o", out]) == 0
    # a Kineto trace is a Chrome trace too; annotations keep their real times and threads, so
    # the one that crosses a step boundary overlaps it there (as torch.profiler's own do)
    problems = validate(load(out)).problems
    assert problems and all("'my_region'" in p for p in problems)
    t = read_trace(out)
    assert _kernel_time(out) == pytest.approx(
        {"compute": 3 * 2000.0, "memory": 3 * 400.0, "communication": 0.0}
    )
    copies = t.cat == CAT["gpu_memcpy"]
    assert int(t.nbytes[copies].sum()) == 3 * (5 << 20)
    steps = [t.names[i] for i in t.name[t.cat == CAT["user_annotation"]]]
    assert steps.count("ProfilerStep#1") == 3 and steps.count("ProfilerStep#2") == 3
    # every kernel is linked to the launch inside the op that issued it
    kernels = t.cat == CAT["kernel"]
    launches = set(t.correlation[t.cat == CAT["cuda_runtime"]].tolist())
    assert set(t.correlation[kernels].tolist()) <= launches
    # the trace reads as a trace: report finds the pageable copies, and it exports to Chrome
    p = run_cli("report", out, "--format", "json")
    assert p.returncode == 0 and "memcpy-pageable" in {
        f["rule"] for f in json.loads(p.stdout)["findings"]
    }
    export(out, "chrome", str(tmp_path / "again.json"))
    assert validate(load(str(tmp_path / "again.json"))).problems == []


def test_kineto_export_needs_profiler_windows(tmp_path) -> None:
    rec = str(tmp_path / "samples-only.infertop")
    w = RecordingWriter(rec)
    w.write(definitions() + [sample_window(1_700_000_000.0, ((MAIN, 0, 10),))])
    w.close()
    p = run_cli("export", rec, "--format", "kineto", "-o", str(tmp_path / "k.json"))
    assert p.returncode == 5 and "no torch-profiler windows" in p.stderr


def test_an_imported_trace_exports_everywhere(tmp_path) -> None:
    from infertop.record.importer import import_trace

    trace = str(TRACES / "a100_alexnet_pageable_memcpy.json.gz")
    rec = str(tmp_path / "alexnet.infertop")
    import_trace(trace, rec)
    chrome = str(tmp_path / "alexnet.json.gz")
    export(rec, "chrome", chrome)
    doc = load(chrome)
    assert validate(doc).problems == []
    assert any(e.get("cat") == "gpu copy" and "Pageable" in e["name"] for e in doc["traceEvents"])
    kineto = str(tmp_path / "alexnet.pt.trace.json")
    export(rec, "kineto", kineto)
    want, got = _kernel_time(trace), _kernel_time(kineto)
    for kind in ("compute", "memory"):
        assert got[kind] == pytest.approx(want[kind], rel=1e-3)
