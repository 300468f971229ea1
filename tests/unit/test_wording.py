"""What the reports print for people, read as a new user reads it: idle is outside the stages'
100 %, and a finding's threshold is a percentage beside the share it was judged against."""

from __future__ import annotations

import json

import pytest

from infertop.cli import main
from infertop.report.evidence import evidence_lines, evidence_summary
from infertop.report.text import render_markdown, render_text
from tests.support import data
from tests.support.cli import run_cli

RECORDING = data.DATA / "recordings" / "textgen_service.infertop"


def _report(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(["report", str(RECORDING), *argv]) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def report_json() -> str:
    """The committed recording's report document, as ``report --format json`` prints it."""
    p = run_cli("report", str(RECORDING), "--format", "json")
    assert p.returncode == 0, p.stderr
    return p.stdout


def _rep(report_json: str, views: list[str], idle: float) -> dict:
    """That report with the views and the idle share a test needs, and one finding of a stage
    at two thirds against a 25 % threshold."""
    rep = json.loads(report_json)
    rep["sampling"]["views"] = views
    rep["idle"]["share_of_all"] = idle
    rep["findings"] = [
        {"rule": "preprocess-hot", "severity": "high", "title": "preprocess takes 67% of active time",
         "evidence": {"share": 0.666, "threshold": 0.25}, "where": [], "hint": "batch it",
         "pid": None},
    ]  # fmt: skip
    return rep


@pytest.mark.parametrize(
    "views,whose",
    [(["cpu"], "of all thread time"), (["wall", "cpu"], "of the pipeline threads' time")],
)
def test_idle_is_said_to_be_outside_the_stages_100_percent(
    report_json: str, views: list[str], whose: str
) -> None:
    text = render_text(_rep(report_json, views, 0.485))
    line = next(ln for ln in text.splitlines() if "idle" in ln)
    assert line.strip().startswith("idle (not in the shares above): 48.5% " + whose), line


def test_the_recordings_report_puts_idle_outside_the_shares(capsys) -> None:  # noqa: ANN001
    text = _report(capsys)
    assert "idle (not in the shares above): 4.6% of the pipeline threads' time" in text
    assert "(idle:" not in text


def test_a_findings_threshold_reads_as_a_percentage_like_its_share() -> None:
    ev = {"share": 0.666, "threshold": 0.25}
    assert evidence_summary(ev) == "share 66.6%, threshold 25.0%"
    assert evidence_lines(ev) == ["  share: 66.6%", "  threshold: 25.0%"]
    # a share's threshold by another name of share; a threshold beside no share keeps its number
    assert evidence_summary({"share_of_latency": 0.4, "threshold": 0.3}).endswith("threshold 30.0%")
    assert evidence_summary({"p99_ms": 80.0, "threshold": 0.5}) == "p99_ms 80, threshold 0.5"
    # tables are left to the findings view and the JSON
    assert evidence_summary({"copies": {"HtoD": {"count": 3}}}) == ""


def test_the_text_and_markdown_reports_show_the_evidence_in_percent(report_json: str) -> None:
    rep = _rep(report_json, ["wall", "cpu"], 0.1)
    assert "      evidence: share 66.6%, threshold 25.0%" in render_text(rep).splitlines()
    assert "Evidence: share 66.6%, threshold 25.0%." in render_markdown(rep)


def test_the_json_keeps_the_rules_fractions(report_json: str, capsys) -> None:  # noqa: ANN001
    evidence = json.loads(report_json)["findings"][0]["evidence"]
    assert evidence == {"share": 0.169, "threshold": 0.15}  # serialize-hot, as the rule made it
    assert "      evidence: share 16.9%, threshold 15.0%" in _report(capsys).splitlines()


def test_a_traces_text_report_shows_its_findings_evidence() -> None:
    p = run_cli("report", str(data.TRACES / "a100_sampled_rank0.json.gz"))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if "python-overhead" in ln)
    assert lines[at + 1].startswith("      evidence: outside_share 54.6%, top_level_ops 200")
