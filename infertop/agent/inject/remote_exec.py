"""Transport for Python >= 3.14: ``sys.remote_exec(pid, boot_file)`` (PEP 768), from this
interpreter if it has it, else from the target's own interpreter binary. The target runs the
file at its next safe point; the bootstrap is not needed."""

from __future__ import annotations

import subprocess
import sys

from infertop.agent.inject.result import DENIED, FAILED, PTRACE_HINT, InjectResult


def via_remote_exec(pid: int, boot_file: str, inner_boot: str) -> InjectResult:
    """Ask ``pid`` to run ``inner_boot`` (``boot_file`` as the target sees it)."""
    remote_exec = getattr(sys, "remote_exec", None)
    try:
        if remote_exec is not None:
            remote_exec(pid, inner_boot)
        else:
            exe = f"/proc/{pid}/exe"
            proc = subprocess.run(
                [exe, "-I", "-c", f"import sys; sys.remote_exec({pid:d}, {inner_boot!r})"],
                capture_output=True,
                text=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["failed"])[-1]
                return InjectResult(
                    False, kind=FAILED, reason=f"sys.remote_exec: {tail}", method="remote_exec"
                )
    except PermissionError as exc:
        reason = f"sys.remote_exec: {exc}; {PTRACE_HINT}"
        return InjectResult(False, kind=DENIED, reason=reason, method="remote_exec")
    except Exception as exc:  # noqa: BLE001 - any failure is a reason, never a traceback
        reason = f"sys.remote_exec: {exc}"
        return InjectResult(False, kind=FAILED, reason=reason, method="remote_exec")
    return InjectResult(True, method="remote_exec")
