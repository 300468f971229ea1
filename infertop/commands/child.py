"""The child process of ``run`` and ``demo``: started with the agent armed, waited for until
py-spy can read it, shown in the live UI, and stopped on the way out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

import infertop
from infertop.collect.target import inspect_target
from infertop.commands.wiring import CollectOptions, live
from infertop.errors import TargetNotFound, TargetUnsupported, UsageError
from infertop.model.events import TargetInfo


def run_child(cmd: Sequence[str], opts: CollectOptions, record: str | None, log_path: str) -> int:
    """Start ``cmd`` (its output into ``log_path``), open the live UI on it, stop it after."""
    proc = start_child(cmd, log_path, opts.inject)
    try:
        target = wait_attachable(proc, log_path)
        return live(target, opts, record)
    finally:
        stop_child(proc)
        print(f"the command's output is in {log_path}", file=sys.stderr)


def start_child(cmd: Sequence[str], log_path: str, inject: bool) -> subprocess.Popen[bytes]:
    # the child arms the agent at start-up: our sitecustomize (first on its path) imports
    # infertop.agent when INFERTOP_AGENT=1, so nothing has to be injected later
    pkg_parent = os.path.dirname(os.path.dirname(infertop.__file__))
    site_dir = os.path.join(pkg_parent, "infertop", "agent", "_site")
    path = os.pathsep.join(p for p in (site_dir, pkg_parent, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    if inject:
        env["INFERTOP_AGENT"] = "1"
    with open(log_path, "ab") as log:  # the child has its own copy of the descriptor
        try:
            return subprocess.Popen(
                list(cmd), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                preexec_fn=own_group_and_term_with_parent,  # noqa: PLW1509 (no other thread runs yet)
            )  # fmt: skip
        except FileNotFoundError:
            raise UsageError(f"command not found: {cmd[0]}") from None
        except PermissionError:
            raise UsageError(f"cannot execute {cmd[0]}: permission denied") from None


def own_group_and_term_with_parent() -> None:
    """In a child of `run`/`demo`: out of the terminal's Ctrl-C (own process group, same session
    so py-spy and the target share a scheduler autogroup), and SIGTERM if infertop dies."""
    # imported here: it runs in the forked child only
    import ctypes

    os.setpgid(0, 0)
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def wait_attachable(
    proc: subprocess.Popen[bytes], log_path: str, timeout: float = 15.0
) -> TargetInfo:
    """py-spy can read a child only once its interpreter is up: retry until it can."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise TargetNotFound(
                f"the command exited (code {proc.returncode}) before infertop could attach",
                f"its output is in {log_path}",
            )
        try:
            return inspect_target(proc.pid)
        except (TargetNotFound, TargetUnsupported):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
