"""What infertop prints and writes, held still while its insides move.

``report --format json`` of every committed torch.profiler trace, of a directory of ranks, of
an imported trace and of a committed recording; the text report of that recording; its Chrome
export and a trace's. Each is compared, whole, with the output saved under
``tests/data/golden/`` before the code was rearranged. Paths the run chose (a temporary
folder) are reduced to their file names, and paths of this machine to what they are in any
checkout (``tests/support/fixture_paths.py``: the repository's relative to it, a home folder as
``~``), both when compared and when written; nothing else is left out, so any change in a
number, a key or an order fails here with the first place it differs.

An intended change of output is made visible by regenerating the files and reading their diff:
``INFERTOP_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_golden_outputs.py``.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from infertop.cli import main
from tests.support import data
from tests.support.fixture_paths import scrub_text

GOLDEN = data.DATA / "golden"
RECORDING = data.DATA / "recordings" / "textgen_service.infertop"
UPDATE = os.environ.get("INFERTOP_UPDATE_GOLDEN") == "1"
TRACE_NAMES = [p.name.removesuffix(".json.gz") for p in sorted(data.TRACES.glob("*.json.gz"))]


def _run(capsys, *argv: str) -> str:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def _plain_paths(value: object, tmp: str) -> object:
    """Paths under the test's temporary folder as file names, everywhere in a JSON value."""
    if isinstance(value, dict):
        return {k: _plain_paths(v, tmp) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_paths(v, tmp) for v in value]
    if isinstance(value, str) and tmp in value:
        return value.replace(tmp + os.sep, "").replace(tmp, "")
    return value


def _check(name: str, text: str) -> None:
    path = GOLDEN / name
    text = scrub_text(text)  # the same wherever the checkout is, and no machine's folders kept
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.is_file():
        pytest.fail(f"no golden output {path}: make it with INFERTOP_UPDATE_GOLDEN=1")
    want = path.read_text(encoding="utf-8")
    if text != want:
        got_lines, want_lines = text.splitlines(), want.splitlines()
        at = next(
            (i for i, (a, b) in enumerate(zip(got_lines, want_lines)) if a != b),
            min(len(got_lines), len(want_lines)),
        )
        got_line = got_lines[at] if at < len(got_lines) else "<end>"
        want_line = want_lines[at] if at < len(want_lines) else "<end>"
        pytest.fail(f"{name} differs from its golden output at line {at + 1}:\n"
                    f"  now:    {got_line[:300]}\n  golden: {want_line[:300]}")  # fmt: skip


def _json_text(value: object) -> str:
    return json.dumps(value, indent=1, sort_keys=False) + "\n"


def _report_json(capsys, target: str, tmp: str) -> str:
    return _json_text(_plain_paths(json.loads(_run(capsys, "report", target, "--format", "json")), tmp))


@pytest.mark.parametrize("name", TRACE_NAMES)
def test_report_of_each_trace_is_unchanged(capsys, name: str) -> None:
    path = data.trace(f"{name}.json.gz")
    _check(f"report-{name}.json", _report_json(capsys, str(path), str(data.DATA)))


def test_report_of_a_rank_directory_is_unchanged(capsys, tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for name in ("a100_sampled_rank0", "cpu_only_rank34"):
        shutil.copy(data.trace(f"{name}.json.gz"), ranks)
    _check("report-ranks.json", _report_json(capsys, str(ranks), str(tmp_path)))


def test_import_then_report_of_a_trace_is_unchanged(capsys, tmp_path: Path) -> None:
    out = tmp_path / "alexnet.infertop"
    _run(capsys, "import", str(data.trace("a100_alexnet_pageable_memcpy.json.gz")), "-o", str(out))
    _check("report-imported-alexnet.json", _report_json(capsys, str(out), str(tmp_path)))


def test_reports_of_a_recording_are_unchanged(capsys) -> None:
    if not RECORDING.is_file():
        pytest.fail(f"test data missing: {RECORDING}")
    _check("report-textgen_service.json", _report_json(capsys, str(RECORDING), str(data.DATA)))
    text = _run(capsys, "report", str(RECORDING)).replace(str(data.DATA) + os.sep, "")
    _check("report-textgen_service.txt", text)


@pytest.mark.parametrize(
    "source,name",
    [(RECORDING, "chrome-textgen_service.json"),
     (data.TRACES / "a100_alexnet_pageable_memcpy.json.gz", "chrome-alexnet.json")],
)  # fmt: skip
def test_chrome_exports_are_unchanged(capsys, tmp_path: Path, source: Path, name: str) -> None:
    out = tmp_path / "trace.json.gz"
    _run(capsys, "export", str(source), "--format", "chrome", "-o", str(out))
    with gzip.open(out, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    _check(name, _json_text(_plain_paths(doc, str(data.DATA))))
