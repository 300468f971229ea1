"""export and diff on real recorded sessions of the bundled sample service."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest
from support.chrome_trace import load, validate

from infertop.record.importer import import_trace
from infertop.trace.gpu import summarize_gpu
from infertop.trace.table import read_trace
from tests.support import data

from .helpers import ROOT, infertop, read_truth, report_json, start_target, stop_target

pytestmark = pytest.mark.slow
SCHEMA = json.loads((ROOT / "tests/fixtures/export/speedscope-schema.json").read_text())


def _record(tmp_path, name: str, extra: list[str], inject: bool) -> str:
    truth = str(tmp_path / f"{name}.truth.json")
    target = start_target(
        ["-m", "samples.textgen_service", "--clients", "2", "--truth", truth, *extra]
    )
    try:
        while read_truth(truth)["requests"] < 3:  # serving
            time.sleep(0.2)
        out = str(tmp_path / f"{name}.infertop")
        flags = ["--inject", "--profile-period", "1", "--profile-window", "0.2"] if inject else []
        p = infertop("record", str(target.pid), "-o", out, "--duration", "4", *flags)
        assert p.returncode == 0, p.stderr
    finally:
        stop_target(target)
    return out


@pytest.mark.long  # two recordings and every export: ~25 s
def test_a_real_session_exports_and_diffs(tmp_path) -> None:
    base = _record(tmp_path, "base", [], inject=True)
    # the Chrome trace: valid on every track, with the service's threads, stages and torch ops
    out = str(tmp_path / "base.json.gz")
    p = infertop("export", base, "--format", "chrome", "-o", out)
    assert p.returncode == 0, p.stderr
    doc = load(out)
    rep = validate(doc)
    assert rep.problems == []
    names = set(rep.names.values())
    assert {"batcher", "stage · batcher"} <= names
    ev = doc["traceEvents"]
    # every stage the samples show has its slices (preprocess too, unless a busy machine's 4 s
    # gave it no sample: on a loaded run it had none)
    sampled = {s["name"] for s in report_json(base)["stages"] if s.get("cpu_samples")} - {"idle"}
    sliced = {e["name"] for e in ev if e.get("cat") == "stage"}
    assert "forward" in sliced and sampled <= sliced, (sampled, sliced)
    assert any(e.get("cat") == "torch op" and e["name"].startswith("aten::") for e in ev)
    # speedscope: schema-valid, a profile per sampled thread and per stage
    ss = str(tmp_path / "base.speedscope.json")
    assert infertop("export", base, "--format", "speedscope", "-o", ss).returncode == 0
    sdoc = json.loads(Path(ss).read_text())
    jsonschema.validate(sdoc, SCHEMA)
    profiles = {x["name"] for x in sdoc["profiles"]}
    assert "stage forward" in profiles and any(n.startswith("thread batcher") for n in profiles)
    # kineto: the agent's windows as a torch.profiler trace, valid as a trace and readable
    kt = str(tmp_path / "base.pt.trace.json.gz")
    assert infertop("export", base, "--format", "kineto", "-o", kt).returncode == 0
    assert validate(load(kt)).problems == []
    rep = infertop("report", kt, "--format", "json")
    assert rep.returncode == 0 and json.loads(rep.stdout)["ops"]
    # diff: the session against itself passes; against a run with a slow tokenizer it fails
    same = infertop("diff", base, base, "--fail-above", "5")
    assert same.returncode == 0, same.stdout
    slow = _record(tmp_path, "slow", ["--slow-tokenizer"], inject=False)
    d = infertop("diff", base, slow, "--fail-above", "20", "--format", "json")
    assert d.returncode == 1, d.stdout + d.stderr
    regressed = {(r["what"], r["name"]) for r in json.loads(d.stdout)["regressions"]}
    assert ("stage share", "preprocess") in regressed
    # the differential flame: the naive tokenizer's frames grew, the model's share shrank
    fl = infertop("diff", base, slow, "--flame", "--format", "json", "--fail-above", "20")
    assert fl.returncode == 1, fl.stderr  # the exit code is the gate's, as without --flame
    frames = json.loads(fl.stdout)["frames"]
    by_name = {}
    for f in frames:  # the biggest node of each function
        if abs(f["change"]) > abs(by_name.get(f["function"], {"change": 0})["change"]):
            by_name[f["function"]] = f
    assert by_name["Tokenizer._encode_piece_slow"]["base_share"] == 0  # new in the slow run
    assert by_name["Tokenizer.encode_batch"]["change"] > 0.2
    assert by_name["TinyCausalLM.forward"]["change"] < 0  # measured -0.08 under load, -0.2 quiet
    assert not any("_call_impl" in f["function"] for f in frames)  # plumbing folded
    text = infertop("diff", base, slow, "--flame").stdout
    assert "Tokenizer.encode_batch" in text and "new" in text and "\x1b[" not in text  # no tty


#: Holistic Trace Analysis's own venv (requirements-hta.txt; `make test` makes it)
HTA_PYTHON = Path(os.environ.get("INFERTOP_HTA_PYTHON", str(ROOT / ".venv-hta" / "bin" / "python")))
HTA_BREAKDOWN = """
import json, logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
kinds = TraceAnalysis(trace_dir=sys.argv[1]).get_gpu_kernel_breakdown(visualize=False)[0]
print(json.dumps(dict(zip(kinds["kernel_type"], [float(v) for v in kinds["sum"]]))))
"""


@pytest.mark.skipif(
    not HTA_PYTHON.exists(),
    reason=f"needs Holistic Trace Analysis in {HTA_PYTHON} (make .venv-hta/.installed; .ci/run makes it)",
)
def test_holistic_trace_analysis_loads_the_kineto_export(tmp_path) -> None:
    """Holistic Trace Analysis reads the export and finds the same device time by kind as the
    recording holds (an imported real A100 trace)."""
    trace = data.trace("a100_alexnet_pageable_memcpy.json.gz")
    rec = str(tmp_path / "alexnet.infertop")
    import_trace(str(trace), rec)
    folder = tmp_path / "hta"
    folder.mkdir()
    out = str(folder / "rank0.pt.trace.json.gz")
    assert infertop("export", rec, "--format", "kineto", "-o", out).returncode == 0
    hta = subprocess.run([str(HTA_PYTHON), "-c", HTA_BREAKDOWN, str(folder)],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert hta.returncode == 0, hta.stderr[-2000:]
    got = json.loads(hta.stdout.strip().splitlines()[-1])
    want = summarize_gpu(read_trace(str(trace))).kernel_time_us
    assert got["COMPUTATION"] == pytest.approx(want["compute"], rel=0.01)
    assert got["MEMORY"] == pytest.approx(want["memory"], rel=0.01)
