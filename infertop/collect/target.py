"""Finding out whether a pid is a Python process we may sample, before any collector starts."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from infertop import procfs
from infertop.errors import TargetNotFound, TargetUnsupported, UsageError
from infertop.model.events import TargetInfo

PTRACE_HINT = (
    "run infertop as the same user as the target (with ptrace allowed: "
    "/proc/sys/kernel/yama/ptrace_scope = 0) or as root; in a container add CAP_SYS_PTRACE "
    "(docker run --cap-add SYS_PTRACE)"
)


def find_pyspy() -> str:
    """The py-spy binary: $INFERTOP_PYSPY, else next to this interpreter (a venv), else on PATH."""
    chosen = os.environ.get("INFERTOP_PYSPY")
    if chosen:
        if not os.access(chosen, os.X_OK):
            raise UsageError(
                f"py-spy not found at INFERTOP_PYSPY={chosen}",
                "point INFERTOP_PYSPY at a py-spy binary, or unset it to use the bundled one",
            )
        return chosen
    here = Path(sys.executable).parent / "py-spy"
    if here.exists():
        return str(here)
    found = shutil.which("py-spy")
    if found is None:
        raise UsageError(
            "py-spy is not installed",
            "pip install py-spy (it is a dependency of infertop; reinstall infertop)",
        )
    return found


def _cmdline(pid: int) -> str | None:
    try:
        args = procfs.cmdline(pid)
    except OSError:
        return None
    return " ".join(a for a in args if a) or None


def check_pid(pid: int) -> None:
    """Raise TargetNotFound unless ``pid`` is a live process we may signal."""
    if pid <= 0:
        raise TargetNotFound(f"no process with pid {pid}", "pass the pid of a running process")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise TargetNotFound(
            f"no process with pid {pid}", "check the pid with `ps aux | grep python`"
        ) from None
    except PermissionError:
        raise TargetNotFound(
            f"permission denied for pid {pid} (it belongs to another user)", PTRACE_HINT
        ) from None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes
    return procfs.state(pid) not in ("Z", "X")  # None (unreadable): alive, as kill said


#: how long a target that py-spy found gone ("No such process") may take to be gone for us
EXITING_S = 2.0
_VERSION_RE = re.compile(r"^Python v(\d+\.\d+\.\d+\S*)", re.M)


def inspect_target(pid: int, pyspy: str | None = None) -> TargetInfo:
    """Check the target with one ``py-spy dump`` (about 30 ms) and describe it."""
    check_pid(pid)
    pyspy = pyspy or find_pyspy()
    try:
        proc = subprocess.run(
            [pyspy, "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise TargetUnsupported(
            f"py-spy could not read pid {pid} within 20 s", "is the process stopped (SIGSTOP)?"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot run py-spy ({pyspy}): {exc}", "reinstall py-spy") from None
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise classify_pyspy_failure(pid, text)
    m = _VERSION_RE.search(text)
    return TargetInfo(
        pid=pid,
        cmdline=_cmdline(pid),
        python=m.group(1) if m else None,
        torch=None,
        started=time.time(),
    )


def classify_pyspy_failure(pid: int, text: str) -> Exception:
    """Turn py-spy's error output into one of our errors with a useful hint."""
    first = next((ln for ln in text.splitlines() if ln.startswith("Error:")), text.strip()[:200])
    lowered = text.lower()
    if "no such process" in lowered:
        # py-spy found the target on its way out (its threads gone, the process not yet a
        # zombie): give it a moment to be gone before saying anything else of it
        deadline = time.monotonic() + EXITING_S
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    if not pid_alive(pid):
        return TargetNotFound(f"process {pid} exited")
    if "permission denied" in lowered or "operation not permitted" in lowered:
        return TargetNotFound(f"permission denied when reading process {pid}", PTRACE_HINT)
    if "failed to find python version" in lowered or "python interpreter" in lowered:
        exe = _cmdline(pid) or "?"
        return TargetUnsupported(
            f"process {pid} ({exe[:60]}) is not a Python process py-spy can read",
            "pass the pid of the Python interpreter itself (not a shell or launcher wrapping it)",
        )
    return TargetUnsupported(f"py-spy cannot sample process {pid}: {first.removeprefix('Error: ')}")
