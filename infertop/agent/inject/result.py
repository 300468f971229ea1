"""What an injection answers (``InjectResult`` and its kinds), and what its parts share."""

from __future__ import annotations

import time
from dataclasses import dataclass

#: ``kind`` of an InjectResult, for the caller's exit code / status line
OK = "ok"
NOT_FOUND = "not_found"  # no such process
DENIED = "denied"  # another user's process, or ptrace not permitted
UNSUPPORTED = "unsupported"  # not Python, Python too old, unsupported machine
NO_TORCH = "no_torch"  # torch not imported (yet)
NO_TOOL = "no_tool"  # gdb needed but missing
TIMEOUT = "timeout"  # the main thread never reached a safe point in time
BUSY = "busy"  # an agent is there but serves another client (another infertop)
FAILED = "failed"  # anything else

MIN_PYTHON = (3, 8)
PTRACE_HINT = (
    "run infertop as the target's user (with /proc/sys/kernel/yama/ptrace_scope = 0) or as "
    "root; in a container add CAP_SYS_PTRACE"
)


@dataclass
class InjectResult:
    ok: bool
    kind: str = OK
    reason: str | None = None
    socket_path: str | None = None
    method: str | None = None  # "armed" (already there), "remote_exec", "ptrace", "gdb"
    python: str | None = None  # the target's Python version, when known
    freeze_s: float | None = None  # how long the target (ptrace: its main thread) was stopped
    elapsed_s: float = 0.0

    def __bool__(self) -> bool:
        return self.ok


@dataclass
class PythonInfo:
    version: tuple[int, int]
    lib_path: str  # the ELF that holds the C API: libpython3.X.so or the executable
    shared: bool  # lib_path is a shared libpython (False: linked into the executable)


def fail(kind: str, reason: str, t0: float, **kw: object) -> InjectResult:
    """A failed result, timed from ``t0`` (``time.monotonic()`` when the injection began)."""
    elapsed = time.monotonic() - t0
    return InjectResult(
        False, kind=kind, reason=reason, elapsed_s=elapsed, **kw  # type: ignore[arg-type]
    )
