"""``diff`` gates host memory: a leak that appears, or a peak that grows, is a regression; a flat
process's noise is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infertop.cli import main
from infertop.compare.diff import Row, _regressed
from infertop.model.events import TargetInfo
from infertop.model.host_memory import HostMemoryReading
from infertop.record.writer import RecordingWriter

MIB = 1 << 20
RECORDINGS = Path(__file__).parent.parent / "data" / "recordings"


def _recording(path: Path, rate: float, base_mib: int = 600, noise: int = 0) -> str:
    """45 s of one process at ``rate`` bytes/s from ``base_mib``; ``noise``: bytes of jitter."""
    w = RecordingWriter(str(path))
    w.write([TargetInfo(7, "python serve.py", "3.12.1", None, 1000.0)])
    w.write([
        HostMemoryReading(1000.0 + k, 7, base_mib * MIB + int(rate * k) + (noise if k % 2 else 0),
                          None, None, None, 0, k, 0)
        for k in range(46)
    ])  # fmt: skip
    w.close()
    return str(path)


def _diff(capsys: pytest.CaptureFixture[str], base: str, new: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["diff", base, new, "--fail-above", "10", "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)


def test_a_leak_that_appears_regresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flat = _recording(tmp_path / "flat.infertop", 0.0, base_mib=100, noise=300_000)
    leak = _recording(tmp_path / "leak.infertop", 500_000, base_mib=100)
    rc, doc = _diff(capsys, flat, leak)
    assert rc == 1
    rows = {r["name"]: r for r in doc["compared"] if r["what"] == "memory"}
    assert rows["growth past warm-up"]["regressed"] and rows["growth past warm-up"][
        "new"
    ] == pytest.approx(5e5, rel=0.02)
    assert rows["peak RSS"]["regressed"]  # 22 MB more: +22 %, past the 16 MiB floor
    capsys.readouterr()
    assert main(["diff", flat, leak, "--fail-above", "10"]) == 1
    text = capsys.readouterr().out
    assert "host memory (peak RSS of all processes; growth of the fastest-growing one):" in text
    assert "growth past warm-up" in text and "488.3 KiB/s" in text and "REGRESSION" in text


def test_noise_and_a_missing_side_do_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _recording(tmp_path / "a.infertop", 0.0, noise=300_000)
    b = _recording(tmp_path / "b.infertop", 1000.0, base_mib=603, noise=900_000)  # +3 MB, 1 KB/s
    rc, doc = _diff(capsys, a, b)
    assert rc == 0 and doc["regressions"] == []
    old = str(RECORDINGS / "textgen_service.infertop")  # format 1.7: no host memory
    rc, doc = _diff(capsys, old, b)
    memory = [r for r in doc["compared"] if r["what"] == "memory"]
    assert memory and not any(r["gated"] for r in memory)
    assert not any(r["what"] == "memory" for r in doc["regressions"])


def test_the_floors() -> None:
    assert not _regressed(Row("memory", "peak RSS", 100 * MIB, 115 * MIB, "bytes"), 10)
    assert _regressed(Row("memory", "peak RSS", 100 * MIB, 117 * MIB, "bytes"), 10)
    assert not _regressed(Row("memory", "growth past warm-up", 0.0, 60_000.0, "B/s"), 10)
    assert _regressed(Row("memory", "growth past warm-up", 0.0, 70_000.0, "B/s"), 10)
