"""Report schema 2 and diff with the two views of time, on recordings written to disk."""

from __future__ import annotations

import json
from pathlib import Path

from infertop.cli import main
from tests.support.wall_recording import write_wall_recording


def _report(path: Path, capsys) -> dict:  # type: ignore[no-untyped-def]
    assert main(["report", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_report_2_has_wall_shares_and_cpu_shares(tmp_path: Path, capsys) -> None:
    rep = _report(write_wall_recording(tmp_path / "r.infertop"), capsys)
    assert rep["infertop_report"] == 2 and rep["sampling"]["views"] == ["wall", "cpu"]
    st = {s["name"]: s for s in rep["stages"]}
    assert abs(st["preprocess"]["share"] - 0.5) < 1e-6  # the tokenizer's whole wall time
    assert abs(st["preprocess"]["cpu_share"] - 10 / 60) < 1e-6  # its active samples only
    assert "other" not in st  # the sleeping helper: nothing, in either view
    assert abs(sum(s["share"] for s in rep["stages"]) - 1) < 1e-6
    assert abs(sum(s["cpu_share"] for s in rep["stages"]) - 1) < 1e-6
    # 10 wall windows of 1 s cover half the session: seconds are of the whole of it
    assert abs(st["preprocess"]["seconds"] - 10.0) < 0.01


def test_a_recording_without_wall_windows_reports_its_cpu_view_as_both(tmp_path: Path, capsys) -> None:
    rep = _report(write_wall_recording(tmp_path / "old.infertop", wall=False), capsys)
    assert rep["sampling"]["views"] == ["cpu"]
    assert all(s["share"] == s["cpu_share"] for s in rep["stages"])


def test_diff_compares_wall_with_wall_and_cpu_when_one_has_none(tmp_path: Path, capsys) -> None:
    base = write_wall_recording(tmp_path / "base.infertop", encode_wall=20)
    slower = write_wall_recording(tmp_path / "new.infertop", encode_wall=50)
    old = write_wall_recording(tmp_path / "old.infertop", wall=False)
    # the tokenizer's wall time grew 2.5 times, its CPU did not: a wall regression
    assert main(["diff", str(base), str(slower), "--fail-above", "20"]) == 1
    out = capsys.readouterr().out
    assert "stage shares of wall time" in out and "REGRESSION" in out.split("stage shares of wall")[1]
    # against a recording with CPU windows only, both sides are CPU: the same, nothing regressed
    assert main(["diff", str(old), str(slower), "--fail-above", "20"]) == 0
    out = capsys.readouterr().out
    assert "stage shares of CPU time" in out and "compared as CPU time" in out
