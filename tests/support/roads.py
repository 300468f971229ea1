"""The two roads from a torch.profiler trace to a report, for tests that they agree: ``report
TRACE``, and ``import TRACE`` + ``report`` of the recording (docs/architecture.md)."""

from __future__ import annotations

import json
from pathlib import Path

from infertop.cli import main


def report(capsys, path: str) -> dict:
    capsys.readouterr()
    assert main(["report", path, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def both_roads(capsys, trace: Path, tmp_path: Path) -> tuple[dict, dict]:
    """``report TRACE``, and ``import TRACE`` + ``report`` of the recording."""
    rec = tmp_path / f"{trace.name}.infertop"
    direct = report(capsys, str(trace))
    assert main(["import", str(trace), "-o", str(rec)]) == 0
    return direct, report(capsys, str(rec))
