"""The py-spy windows' folder: an infertop killed with SIGKILL cannot remove its own, and the
next infertop removes it -- only one that is this user's, of a process gone, unused for a
minute (tests/integration/test_record_real.py kills a real one)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from infertop.collect.pyspy import FOLDER_PREFIX, STALE_FOLDER_S, sampling_folder, sweep_stale_folders


def _gone_pid() -> int:
    """A pid no process has now."""
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def _folder(root: Path, name: str, age_s: float) -> Path:
    path = root / name
    path.mkdir()
    (path / "window.txt").write_text("a py-spy window")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_a_killed_infertop_s_folder_goes_and_every_other_stays(tmp_path: Path) -> None:
    gone, old = _gone_pid(), STALE_FOLDER_S + 60
    stale = _folder(tmp_path, f"{FOLDER_PREFIX}{gone}-abc123", old)
    kept = [
        _folder(tmp_path, f"{FOLDER_PREFIX}{os.getpid()}-abc123", old),  # its infertop runs
        _folder(tmp_path, f"{FOLDER_PREFIX}{gone}-def456", 5),  # written to a moment ago
        _folder(tmp_path, f"{FOLDER_PREFIX}abc123", old),  # no pid in the name
        _folder(tmp_path, f"other-{gone}-abc123", old),  # not ours at all
    ]
    plain = tmp_path / f"{FOLDER_PREFIX}{gone}-file"
    plain.write_text("not a folder")
    os.utime(plain, (time.time() - old, time.time() - old))
    assert sweep_stale_folders(str(tmp_path)) == 1
    assert not stale.exists()
    assert all(p.is_dir() and (p / "window.txt").exists() for p in kept) and plain.exists()
    assert sweep_stale_folders(str(tmp_path / "absent")) == 0  # never raises


def test_the_collector_s_folder_names_its_infertop(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # gettempdir() reads TMPDIR again
    stale = _folder(tmp_path, f"{FOLDER_PREFIX}{_gone_pid()}-abc123", STALE_FOLDER_S + 60)
    folder = sampling_folder()
    try:
        assert Path(folder.name).parent == tmp_path
        assert Path(folder.name).name.startswith(f"{FOLDER_PREFIX}{os.getpid()}-")
        assert not stale.exists()
    finally:
        folder.cleanup()
    assert list(tmp_path.iterdir()) == []
