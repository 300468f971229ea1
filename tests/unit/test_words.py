"""Counts of one in the singular wherever a count of windows, samples or processes is printed:
"1 window", never "1 windows" (``infertop/words.py``)."""

from __future__ import annotations

import json

import pytest

from infertop.report.processes import processes_text
from infertop.report.text import render_markdown
from infertop.words import counted, plural
from tests.support import data
from tests.support.cli import run_cli

RECORDING = data.DATA / "recordings" / "textgen_service.infertop"


@pytest.fixture(scope="module")
def report_json() -> str:
    p = run_cli("report", str(RECORDING), "--format", "json")
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_counts_of_one_are_singular() -> None:
    assert [plural(n, "window") for n in (0, 1, 2)] == ["windows", "window", "windows"]
    assert plural(1, "process") == "process" and plural(3, "process") == "processes"
    assert plural(2, "op window") == "op windows"
    assert counted(1, "sample") == "1 sample" and counted(1204, "sample") == "1,204 samples"


def test_the_reports_count_one_window_one_sample_one_process(report_json: str) -> None:
    rep = json.loads(report_json)
    rep["sampling"]["samples"] = 1
    assert "- duration: 8.3 s, 1 sample at 50 Hz" in render_markdown(rep)
    rep["processes"] = [
        {"pid": 7, "role": "inference", "samples": 1, "cmdline": "python serve.py", "stages": [],
         "ops": {"windows": 1, "steps": 0, "kernel_time_us": {"compute": 0, "communication": 0},
                 "gpu_busy_share": None}, "findings": []},
    ]  # fmt: skip
    text = "\n".join(processes_text(rep))
    assert " 1 sample" in text and "1 samples" not in text
    assert "1 profiler window" in text and "1 profiler windows" not in text


def test_the_recordings_report_has_one_torch_profiler_window() -> None:
    text = run_cli("report", str(RECORDING)).stdout
    assert "(1 torch-profiler window, 0.1 s profiled)" in text
    assert "1 torch-profiler windows" not in text


def test_one_dropped_sample_is_one_sample() -> None:
    """The report's sampling note on py-spy's errors (``sampling.notes``)."""
    from types import SimpleNamespace

    from infertop.report.build import _sampling_notes

    one = _sampling_notes(SimpleNamespace(errors=1, status_notes=()))  # type: ignore[arg-type]
    assert one[0].startswith("1 sample dropped: py-spy read a thread whose stack changed")
    two = _sampling_notes(SimpleNamespace(errors=2, status_notes=()))  # type: ignore[arg-type]
    assert two[0].startswith("2 samples dropped: ")
