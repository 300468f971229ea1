"""A target pushed into major page faults: the pages of its memory-mapped "weights" reclaimed
from outside every few seconds (``process_madvise`` with ``MADV_PAGEOUT``, as the kernel
reclaims them when a neighbour needs the memory) while it is recorded with default flags and
a ``--stage`` rule naming its forward: the ``memory-pressure`` finding names the stage whose
calls slowed, from the process's major faults read outside it (docs/findings.md)."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import ROOT, report_json, start_target, stop_target, until

pytestmark = pytest.mark.slow
TARGET = str(ROOT / "tests" / "integration" / "targets" / "mapped_weights.py")
_SYS_PIDFD_OPEN, _SYS_PROCESS_MADVISE, _MADV_PAGEOUT = 434, 440, 21  # x86-64 Linux


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _reclaim(pid: int, path: str) -> int:
    """Ask the kernel to reclaim the pages of ``path`` that ``pid`` maps: the bytes advised,
    or -errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(_SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        return -ctypes.get_errno()
    try:
        done = 0
        with open(f"/proc/{pid}/maps") as maps:
            spans = [line.split()[0] for line in maps if line.rstrip().endswith(path)]
        for span in spans:
            a, b = (int(x, 16) for x in span.split("-"))
            iov = _Iovec(a, b - a)
            n = libc.syscall(_SYS_PROCESS_MADVISE, pidfd, ctypes.byref(iov), 1, _MADV_PAGEOUT, 0)
            if n < 0:
                return -ctypes.get_errno()
            done += n
        return done
    finally:
        os.close(pidfd)


@pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64", reason="process_madvise on x86-64 Linux"
)
def test_a_stage_slowed_by_major_faults_is_named_by_memory_pressure(tmp_path: Path) -> None:
    weights = str(tmp_path / "weights.bin")
    target = start_target([TARGET, weights])
    out = str(tmp_path / "faults.infertop")
    try:
        until(lambda: os.path.getsize(weights) == 32 << 20 if os.path.exists(weights) else False, 60,
              "the target's weights file")  # fmt: skip
        until(lambda: _reclaim(target.pid, weights) != 0, 30, "the weights mapped")
        advised = _reclaim(target.pid, weights)
        if advised < 0:
            pytest.skip(f"process_madvise(MADV_PAGEOUT) refused here: errno {-advised}")
        rec = subprocess.Popen(
            [sys.executable, "-m", "infertop", "record", str(target.pid), "-o", out,
             "--duration", "13", "--stage", "forward=*mapped_weights.py:forward"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        started, reclaims, last = time.monotonic(), 0, time.monotonic()
        while rec.poll() is None and time.monotonic() - started < 120:
            # the workload's pressure, not a wait: the pages reclaimed once every 4 s
            if time.monotonic() - last >= 4.0:
                reclaims += _reclaim(target.pid, weights) > 0
                last = time.monotonic()
            time.sleep(0.05)
        _, err = rec.communicate(timeout=60)
        assert rec.returncode == 0, err
    finally:
        stop_target(target)
    assert reclaims >= 2
    rep = report_json(out)
    found = [f for f in rep["findings"] if f["rule"] == "memory-pressure"]
    assert found, [(f["rule"], f["title"]) for f in rep["findings"]]
    slow = found[0]["evidence"]["slow_calls"]
    assert slow[0]["stage"] == "forward", found[0]
    assert found[0]["evidence"]["major_faults_per_s"] > 0, found[0]
    print("memory-pressure:", found[0]["title"])
