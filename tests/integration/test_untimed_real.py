"""A --stage rule naming a function the agent's wrappers cannot reach (defined inside another
one), recorded on the dev venv's Python (3.11): the agent's note names it with its stage, and
the UI's words (``analysis/untimed.py``) say that stage has no timed calls because of it, on
which Python, and what to do instead."""

from __future__ import annotations

import sys

import pytest

from infertop.analysis.snapshot import build_snapshot
from infertop.analysis.untimed import untimed_stages
from infertop.config import Config
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource

from .helpers import ROOT, infertop, report_json, start_target, stop_target

pytestmark = pytest.mark.slow
TARGET = str(ROOT / "tests" / "integration" / "targets" / "nested_rule.py")


@pytest.mark.skipif(sys.version_info[:2] >= (3, 12), reason="sys.monitoring reaches nested functions")
def test_a_rule_s_function_out_of_the_wrappers_reach_is_said_with_its_stage(tmp_path) -> None:
    target = start_target([TARGET])
    out = str(tmp_path / "n.infertop")
    try:
        p = infertop("record", str(target.pid), "-o", out, "--duration", "6",
                     "--stage", "preprocess=*nested_rule.py:make.<locals>.crunch", timeout=180)  # fmt: skip
    finally:
        _, err = stop_target(target)
    assert p.returncode == 0, p.stderr
    assert err == "", err[-2000:]
    rep = report_json(out)
    notes = [n for n in rep["sampling"]["notes"] if "not reached" in n]
    assert notes and "nested_rule.py:crunch [preprocess]" in notes[0], rep["sampling"]["notes"]
    calls = {s["name"]: s["calls"] for s in rep["stages"]}
    assert calls["preprocess"] is None and calls["serialize"], calls  # json.dumps: timed
    src = ReplaySource(read_recording(out), Config())
    gap = untimed_stages(build_snapshot(src.session, t=src.t))
    assert gap is not None and gap.stages == ("preprocess",), gap
    assert gap.unreached == ("nested_rule.py:crunch",), gap
    line = gap.line()
    assert "the agent could not reach nested_rule.py:crunch" in line, line
    assert f"on Python {sys.version_info[0]}.{sys.version_info[1]}" in line, line
    assert 'with infertop.stage("preprocess")' in line, line
