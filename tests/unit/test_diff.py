"""`infertop diff`: what moved between two runs, and exit 1 when a gated number regressed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from support.recordings import write_session

from infertop.cli import main
from tests.support import data
from tests.support.cli import Ran, run_cli

TRACES = data.TRACES


def _diff(*args: str) -> Ran:
    return run_cli("diff", *args)  # in this process: main([...])


@pytest.fixture
def pair(tmp_path) -> tuple[str, str]:
    """The same service before and after: the tokenizer got slower (preprocess calls 200 ms ->
    500 ms, more preprocess samples) and the GEMM kernel 1.5x longer."""
    base = write_session(str(tmp_path / "base.infertop"))
    new = write_session(str(tmp_path / "new.infertop"), slow_encode=30, scale=1.5)
    return base, new


def test_a_recording_against_itself_passes(pair) -> None:
    p = _diff(pair[0], pair[0], "--fail-above", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ok: nothing compared grew more than 1%" in p.stdout


def test_a_regressed_pair_fails_and_says_what_regressed(pair) -> None:
    p = _diff(*pair, "--fail-above", "10")
    assert p.returncode == 1, p.stdout + p.stderr
    regressed = [line for line in p.stdout.splitlines() if line.endswith("REGRESSION")]
    names = " ".join(regressed)
    assert "stage preprocess p50" in names and "stage preprocess p95" in names
    assert "ProfilerStep#* p50" in names  # the step annotations got longer
    assert any(line.split()[0] == "preprocess" for line in regressed)  # its share of samples grew
    assert "GPU time" in names  # the GEMM took longer per step
    assert "stage forward" not in names  # unchanged calls do not fail the build
    assert "new:  [low] preprocess-hot" in p.stdout
    assert "sm80_xmma_gemm" in p.stdout.split("kernels and copies that moved most:")[1]
    # reversed, the same pair is an improvement: the other stages' shares grow (shares are
    # zero-sum) but their time did not, so nothing fails
    q = _diff(pair[1], pair[0], "--fail-above", "10")
    assert q.returncode == 0, q.stdout
    assert "forward" in q.stdout.split("stage shares of CPU time (active samples):")[1]  # CPU windows only


def test_the_threshold_decides(pair) -> None:
    assert _diff(*pair, "--fail-above", "1000").returncode == 0
    assert _diff(*pair).returncode == 0  # no threshold: a report, never a failure
    assert _diff(*pair, "--fail-above", "-3").returncode == 2


def test_json_output_lists_the_regressions(pair, capsys) -> None:
    assert main(["diff", *pair, "--fail-above", "10", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["infertop_diff"] == 1 and doc["per"] == "step"
    reg = {(r["what"], r["name"]) for r in doc["regressions"]}
    assert ("latency", "stage preprocess p50") in reg and ("gpu per step", "GPU time") in reg
    pre = next(r for r in doc["compared"] if r["name"] == "stage preprocess p50")
    assert pre["base"] == pytest.approx(200.0) and pre["new"] == pytest.approx(500.0)
    assert pre["change_pct"] == pytest.approx(150.0) and pre["regressed"]
    assert [f["rule"] for f in doc["findings"]["new"]] == ["preprocess-hot"]


def _slower_kernels(src: Path, dst: Path, factor: float) -> None:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for ev in doc["traceEvents"]:
        if (
            isinstance(ev, dict)
            and ev.get("cat") == "kernel"
            and isinstance(ev.get("dur"), (int, float))
        ):
            ev["dur"] = ev["dur"] * factor
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.mark.slow  # in-process, but seconds long: not in make test-fast
def test_kineto_traces_per_step(tmp_path) -> None:
    trace = TRACES / "v100_training_rank0.json.gz"
    same = _diff(str(trace), str(trace), "--fail-above", "0")
    assert same.returncode == 0, same.stdout
    assert "per step (base 5 steps, new 5)" in same.stdout
    assert "ProfilerStep#* p50" in same.stdout
    slower = tmp_path / "slower.json.gz"
    _slower_kernels(trace, slower, 1.3)
    p = _diff(str(trace), str(slower), "--fail-above", "10")
    assert p.returncode == 1, p.stdout
    assert "GPU time" in p.stdout.split("REGRESSED:")[1]
    assert _diff(str(trace), str(slower), "--fail-above", "50").returncode == 0


def test_a_trace_against_a_recording_compares_what_both_have(pair) -> None:
    p = _diff(str(TRACES / "a100_alexnet_pageable_memcpy.json.gz"), pair[0], "--fail-above", "1")
    # a trace has no samples: stage shares are shown but not gated
    assert "REGRESSION" not in "\n".join(
        l for l in p.stdout.splitlines() if "%" in l and "ms" not in l
    )
    assert "per profiled second" in p.stdout


def test_bad_inputs_are_5_without_a_traceback(tmp_path, pair) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    p = _diff(str(junk), pair[0])
    assert p.returncode == 5 and "Traceback" not in p.stderr and p.stderr.count("\n") <= 2
    p = _diff(str(tmp_path / "missing.infertop"), pair[0])
    assert p.returncode == 5 and "no such file" in p.stderr
