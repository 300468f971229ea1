"""The failure matrix through the CLI (docs/failure-matrix.md): ptrace denied, a target that is
gone by the time infertop looks, a disk that fills while recording. Each: one clear message,
the right exit code, the target unharmed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from infertop.collect.target import classify_pyspy_failure
from infertop.errors import TargetNotFound
from infertop.record.reader import read_recording

from .helpers import INFERTOP, infertop, report_json, start_target, stop_target

pytestmark = pytest.mark.slow


def assert_one_clear_error(p: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert p.returncode == code, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("recording pid ")]  # progress
    assert lines[0].startswith("infertop: ") and all(ln.startswith("  hint: ") for ln in lines[1:])
    for n in needles:
        assert n in p.stderr, p.stderr


def _state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


ROOT_ONLY = os.geteuid() != 0


@pytest.mark.skipif(ROOT_ONLY or shutil.which("setpriv") is None, reason="needs root, setpriv")
def test_ptrace_denied_without_cap_sys_ptrace_is_3_with_the_way_out(tmp_path) -> None:
    """As in a container without CAP_SYS_PTRACE: infertop runs without the capability, and the
    target is one it may not trace (non-dumpable, as setuid programs and some sandboxes are)."""
    code = (
        "import ctypes, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"  # PR_SET_DUMPABLE 0
        "print('ready', flush=True); time.sleep(60)"
    )
    target = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().strip() == "ready"
        out = tmp_path / "x.infertop"
        p = subprocess.run(
            ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace",
             *INFERTOP, "record", str(target.pid), "-o", str(out), "--duration", "2"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert_one_clear_error(p, 3, "permission denied", "CAP_SYS_PTRACE")
        assert not out.exists()
        assert target.poll() is None and _state(target.pid) in ("S", "R")
    finally:
        target.kill()
        target.wait()


@pytest.mark.parametrize("lives_s", [0.0, 0.5, 1.5])
def test_a_target_that_exits_while_infertop_attaches(tmp_path, lives_s: float) -> None:
    """Gone before infertop looks (exit 3, "no process" / "exited"), while it starts up (the
    same, or a short recording), or just after (a recording that says the target exited).
    The target is reaped at once, as its own parent would."""
    target = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({lives_s})"])
    threading.Thread(target=target.wait, daemon=True).start()
    out = tmp_path / "gone.infertop"
    p = infertop("record", str(target.pid), "-o", str(out), "--duration", "20", "--no-inject")
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    if p.returncode == 3:
        assert_one_clear_error(p, 3)
        assert "no process" in p.stderr or "exited" in p.stderr, p.stderr
    else:
        assert p.returncode == 0, p.stderr
        assert "the target exited" in p.stderr
        rep = report_json(str(out))
        assert rep["target_exited"] is True


def test_a_target_that_py_spy_finds_on_its_way_out_is_said_to_have_exited() -> None:
    """py-spy can meet a target whose threads are gone while the process is not yet a zombie
    ("No such process"): that is the target exiting (exit 3), not one py-spy cannot read
    (under load a CI run got exit 4, "py-spy cannot sample process N: No such process")."""
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.4)"])
    threading.Thread(target=target.wait, daemon=True).start()
    err = classify_pyspy_failure(target.pid, "Error: No such process (os error 3)")
    assert isinstance(err, TargetNotFound) and "exited" in str(err), err


DEEP = """\
import random
def a(n):
    return step(n)
def b(n):
    return step(n)
def step(n):
    if n:
        return random.choice((a, b))(n - 1)
    return sum(i * i for i in range(3000))
print("ready", flush=True)
while True:  # a random path of a/b calls: nearly every sample a stack never seen before
    step(random.randrange(20, 60))
"""


def _mount_tmpfs(where: str, size: str) -> bool:
    os.makedirs(where, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", where]
    r = subprocess.run(mount, capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(ROOT_ONLY or shutil.which("mount") is None, reason="needs root to mount")
def test_disk_full_while_recording_stops_with_a_readable_recording(tmp_path) -> None:
    """The recording's file system fills up mid-session: infertop stops with one message (exit
    2: nothing was wrong with the target or the input), the file reads up to the last complete
    record, and the target carries on untouched."""
    disk = str(tmp_path / "disk")
    if not _mount_tmpfs(disk, "256k"):
        pytest.skip("cannot mount a tmpfs here")
    script = tmp_path / "deep.py"  # ever new stacks: a recording that grows fast
    script.write_text(DEEP)
    target = start_target([str(script)])
    try:
        # leave 16 KiB: a few seconds of this target's new stacks (its recording grows ~4 KiB
        # a second, and holds a sample window from its first second)
        with open(os.path.join(disk, "filler"), "wb") as fh:
            fh.write(b"\0" * (256 - 16) * 1024)
        out = os.path.join(disk, "full.infertop")
        t0 = time.monotonic()
        p = infertop("record", str(target.pid), "-o", out, "--duration", "120", "--no-inject")
        assert time.monotonic() - t0 < 110, "it ran to its duration: the disk never filled"
        assert_one_clear_error(p, 2, "recording stopped", "No space left", "free disk space")
        rec = read_recording(out)
        assert any(type(e).__name__ == "SampleWindow" for e in rec.events)
        rep = report_json(out)  # what was written is a recording like any other
        assert rep["sampling"]["samples"] > 0
        assert target.poll() is None and _state(target.pid) in ("S", "R")
    finally:
        out_text, err = stop_target(target)
        subprocess.run(["umount", "-l", disk], capture_output=True)
    assert err == "" and out_text.strip().splitlines() == ["ready"]
