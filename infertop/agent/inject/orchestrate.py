"""``inject(pid)``: the steps in order (see the package's docstring), from looking at the target
to an agent listening; never raises."""

from __future__ import annotations

import os
import secrets
import time

from infertop.agent import protocol
from infertop.agent.inject import armed, boot, probe, tracee
from infertop.agent.inject.gdb import via_gdb
from infertop.agent.inject.ptrace import via_ptrace
from infertop.agent.inject.remote_exec import via_remote_exec
from infertop.agent.inject.result import (
    DENIED,
    FAILED,
    MIN_PYTHON,
    NO_TORCH,
    NOT_FOUND,
    PTRACE_HINT,
    TIMEOUT,
    UNSUPPORTED,
    InjectResult,
    PythonInfo,
    fail,
)


def inject(
    pid: int,
    timeout: float = 5.0,
    *,
    method: str = "auto",
    require_torch: bool = True,
    idle_exit_s: float = 20.0,
) -> InjectResult:
    """Start the agent in process ``pid`` (or find one there); never raises.

    ``timeout``: how long the target's main thread may take to reach a safe point and start the
    agent. ``method``: "auto", "ptrace" or "gdb" (for Python <= 3.13; also settable with
    ``INFERTOP_INJECT``). ``require_torch=False`` allows targets without torch (spans only).
    ``idle_exit_s``: an injected agent with no client for this long removes itself.
    """
    t0 = time.monotonic()
    try:
        return _inject(pid, timeout, method, require_torch, idle_exit_s, t0)
    except Exception as exc:  # noqa: BLE001 # pragma: no cover - a reason, never a traceback
        return fail(FAILED, f"injection failed: {exc}", t0)


def _inject(
    pid: int, timeout: float, method: str, require_torch: bool, idle_exit_s: float, t0: float
) -> InjectResult:
    if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
        return fail(NOT_FOUND, f"no process with pid {pid:d}", t0)
    try:
        uid, gid = probe.target_uid(pid)
    except (OSError, KeyError, ValueError, IndexError):
        return fail(NOT_FOUND, f"no process with pid {pid:d}", t0)
    me = os.geteuid()

    # 1. an agent already listening
    try:
        path = protocol.locate_socket(pid)
    except (OSError, KeyError, ValueError, IndexError):
        path = protocol.socket_path(pid, uid)
    existing = armed.use_existing(pid, path, timeout, t0)
    if existing is not None:
        return existing

    # 2. refusals
    refused = _refusal(pid, uid, me, require_torch, t0)
    if isinstance(refused, InjectResult):
        return refused
    info, version = refused

    # 3./4. get the payload in
    # the socket folder is shared with every other agent and injector of this user, each of
    # which removes it when it is empty on its way out, maybe between our making sure of it
    # and our write: then make sure of it again
    deadline = time.time() + timeout
    for attempt in range(5):
        try:
            socket_dir = protocol.ensure_socket_dir(uid, gid, root=probe.root_prefix(pid))
        except protocol.UnsafeSocketDir as exc:
            return fail(DENIED, f"unsafe socket directory: {exc}", t0, python=version)
        boot_file = os.path.join(socket_dir, f"boot-{pid:d}-{secrets.token_hex(6)}.py")
        inner_boot = boot_file[len(probe.root_prefix(pid)) :]
        source = boot.payload_source(deadline, inner_boot, idle_exit_s)
        try:
            boot.write_boot_file(boot_file, source, uid, gid)
            break
        except FileNotFoundError:
            if attempt < 4:
                continue
            return fail(FAILED, f"cannot write {boot_file}: its folder keeps vanishing", t0,
                        python=version)  # fmt: skip
        except OSError as exc:
            reason = f"cannot write {boot_file}: {exc.strerror or exc}"
            return fail(FAILED, reason, t0, python=version)

    chosen = (os.environ.get("INFERTOP_INJECT") or method or "auto").lower()
    try:
        if info.version >= (3, 14) and chosen == "auto":
            result = via_remote_exec(pid, boot_file, inner_boot)
        else:
            if chosen == "auto":
                chosen = "ptrace" if tracee.supported() is None else "gdb"
            if chosen == "ptrace":
                result = via_ptrace(pid, info, inner_boot)
            elif chosen == "gdb":
                result = via_gdb(pid, info, inner_boot)
            else:
                result = fail(FAILED, f"unknown injection method {chosen!r}", t0)
        if not result.ok:
            boot.remove(boot_file)
            if probe.proc_state(pid) in ("Z", "X", "?"):  # it died under us: say that
                return fail(NOT_FOUND, f"pid {pid:d} exited during injection", t0, python=version)
            result.elapsed_s = time.monotonic() - t0
            result.python = version
            return result
        wait_until = t0 + timeout + 1.0  # the payload checks the deadline before it binds
        if _wait_socket(path, wait_until, pid):
            result.socket_path = path
            result.python = version
            result.elapsed_s = time.monotonic() - t0
            return result
        if not os.path.exists(f"/proc/{pid}"):
            return fail(NOT_FOUND, f"pid {pid:d} exited during injection", t0, python=version)
        return fail(
            TIMEOUT,
            f"the target's main thread did not reach a safe point within {timeout:.1f} s (is it "
            "blocked in a long C call, or not running Python code?); nothing was left running "
            "in it" + _hint_for(pid),
            t0,
            python=version,
            method=result.method,
            freeze_s=result.freeze_s,
        )
    finally:
        boot.remove(boot_file)
        try:
            os.rmdir(socket_dir)  # only if empty: nothing of ours stays behind a failure
        except OSError:
            pass


#: processes whose main thread never runs Python once started, by their command line's
#: start, and what to do instead of injecting
_NO_SAFE_POINT = (
    ("ray::", "; a Ray worker's main thread runs Ray's task loop in C++: arm the agent when "
     "the workers start instead (INFERTOP_AGENT=1 and the worker_process_setup_hook "
     "infertop.agent.arm_from_env in the runtime env; docs/processes.md, Ray Serve)"),
)  # fmt: skip


def _hint_for(pid: int) -> str:
    """What to do instead, for a known kind of process whose main thread runs no Python."""
    try:
        with open(f"/proc/{pid:d}/cmdline", "rb") as fh:
            cmdline = fh.read(256).decode("utf-8", "replace")
    except OSError:
        return ""
    return next((hint for start, hint in _NO_SAFE_POINT if cmdline.startswith(start)), "")


def _refusal(
    pid: int, uid: int, me: int, require_torch: bool, t0: float
) -> InjectResult | tuple[PythonInfo, str]:
    """Step 2: the reason not to inject into ``pid``, else (its Python, its version text)."""
    state = probe.proc_state(pid)
    if state in ("Z", "X"):
        return fail(NOT_FOUND, f"pid {pid:d} has exited", t0)
    if probe.stays_stopped(pid):
        reason = f"pid {pid:d} is stopped (SIGSTOP or a debugger); resume it first"
        return fail(UNSUPPORTED, reason, t0)
    if me != 0 and me != uid:
        return fail(
            DENIED,
            f"pid {pid:d} belongs to uid {uid:d}; infertop runs as uid {me:d} and injects only "
            "into its own user's processes",
            t0,
        )
    try:
        info = probe.python_info(pid)
    except PermissionError:
        reason = f"cannot read /proc/{pid:d}/maps: permission denied; {PTRACE_HINT}"
        return fail(DENIED, reason, t0)
    except OSError as exc:
        return fail(NOT_FOUND, f"cannot inspect pid {pid:d}: {exc.strerror or exc}", t0)
    if info is None:
        reason = f"pid {pid:d} is not a Python process (no libpython, no Python C API)"
        return fail(UNSUPPORTED, reason, t0)
    version = f"{info.version[0]:d}.{info.version[1]:d}"
    if info.version < MIN_PYTHON:
        reason = f"Python {version} is too old for the agent (needs 3.8+)"
        return fail(UNSUPPORTED, reason, t0, python=version)
    if require_torch:
        try:
            torch_loaded = probe.has_torch(pid)
        except OSError as exc:
            reason = f"cannot read /proc/{pid:d}/maps: {exc.strerror or exc}"
            return fail(DENIED, reason, t0)
        if not torch_loaded:
            return fail(
                NO_TORCH,
                f"torch is not imported yet in pid {pid:d}; nothing injected (attach again once "
                "the model is loaded)",
                t0,
                python=version,
            )
    return info, version


def _wait_socket(path: str, deadline: float, pid: int) -> bool:
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        if not os.path.exists(f"/proc/{pid}"):
            return False
        time.sleep(0.02)
    return os.path.exists(path)
