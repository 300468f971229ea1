"""The CLI contract where infertop has to be a process of its own: run as another user, and
the interpreter's last flush of stdout at exit (tests/unit/test_cli.py has the rest)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.support import data

from .helpers import INFERTOP

pytestmark = pytest.mark.slow


def assert_one_clear_error(p: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert p.stderr.startswith("infertop: ")
    for n in needles:
        assert n in p.stderr, p.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run infertop as another user")
def test_other_users_process_is_3_with_a_hint() -> None:
    """infertop run as user 'nobody' against a process of root's: refused, with the way out."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv missing")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    env = {**os.environ, "HOME": "/tmp"}
    probe = subprocess.run(
        [*as_nobody, *INFERTOP, "--version"], check=False, capture_output=True, env=env
    )
    if probe.returncode != 0:
        pytest.skip("user 'nobody' cannot run this checkout's interpreter (private directory)")
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        p = subprocess.run(
            [*as_nobody, *INFERTOP, "record", str(target.pid), "-o", "/tmp/nobody.infertop"],
            check=False, capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
    finally:
        target.kill()
    assert_one_clear_error(p, 3, "permission denied", "CAP_SYS_PTRACE")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_report_into_a_full_disk_is_one_line(fmt: str) -> None:
    """``infertop report X > file`` on a full disk: one line and exit 2, not an internal error."""
    trace = data.trace("a100_alexnet_pageable_memcpy.json.gz")
    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [*INFERTOP, "report", str(trace), "--format", fmt], check=False, stdout=full,
            stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    assert_one_clear_error(p, 2, "cannot write the output", "No space left")
    assert len(p.stderr.strip().splitlines()) == 1
