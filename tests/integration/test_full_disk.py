"""Writing where there is no room, or to something that is not a file: one message, exit 2,
nothing half-written left behind, and never a device node replaced (docs/failure-matrix.md)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from infertop.errors import UsageError
from infertop.record.writer import RecordingWriter
from tests.support.recordings import write_busy

pytestmark = pytest.mark.slow  # infertop as a process of its own, its stdout on /dev/full

INFERTOP = [sys.executable, "-m", "infertop"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*INFERTOP, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


@pytest.fixture
def tiny_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 64 KiB tmpfs (root only)."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)]
    r = subprocess.run(mount, capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.parametrize(("fmt", "name"), [("chrome", "o.json"), ("chrome", "o.json.gz"),
                                           ("speedscope", "o.json")])  # fmt: skip
def test_export_to_a_full_disk(tmp_path: Path, tiny_disk: Path, fmt: str, name: str) -> None:
    rec = write_busy(str(tmp_path / "busy.infertop"), 200)  # exports to far more than 64 KiB
    p = run("export", rec, "--format", fmt, "-o", str(tiny_disk / name))
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("infertop: cannot write") and "No space left" in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1
    assert os.listdir(tiny_disk) == []  # neither the output nor the temporary file


def test_export_does_not_replace_a_special_file(tmp_path: Path) -> None:
    """As root, replacing `-o /dev/null` with a regular file would break the system: exports
    write a temporary file and rename it over OUT, so OUT must be a regular file (or new)."""
    rec = write_busy(str(tmp_path / "busy.infertop"), 3)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    p = run("export", rec, "--format", "chrome", "-o", str(fifo))
    assert p.returncode == 2 and "is not a regular file" in p.stderr, p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_recording_on_a_disk_full_from_the_start() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with pytest.raises(UsageError, match="cannot write recording /dev/full: No space left"):
        RecordingWriter("/dev/full")
