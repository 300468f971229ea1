"""Transport for Python <= 3.13 on x86-64: the built-in ptrace caller (``tracee.py``) makes
the pending call ``Py_AddPendingCall(PyRun_SimpleString, bootstrap)`` on the target's main
thread, which it stops for milliseconds (the other threads keep running).

The bootstrap goes into a page the caller maps in the target with ``mmap`` (a plain system
call, where ``malloc`` could deadlock on an allocator lock held by the interrupted thread); the
payload unmaps it as its first act.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

from infertop import procfs
from infertop.agent.inject import elf, tracee
from infertop.agent.inject.boot import bootstrap
from infertop.agent.inject.result import (
    DENIED,
    FAILED,
    PTRACE_HINT,
    TIMEOUT,
    UNSUPPORTED,
    InjectResult,
    PythonInfo,
)

#: how the helper process is started (``__main__.py``); tests look for it by this command line
HELPER_MODULE = "infertop.agent.inject"
HELPER_FLAG = "--ptrace-session"


def via_ptrace(pid: int, info: PythonInfo, inner_boot: str) -> InjectResult:
    """The ptrace session runs in a short-lived process of its own session: while it holds the
    target's main thread inside a call, only it can put the registers back, so it must outlive
    infertop being killed (SIGKILL, the OOM killer, a closed terminal). Killed mid-call, the
    thread would return to address 0 and the target die."""
    # the directory that holds the infertop package: infertop/agent/inject/ptrace.py, 4 up
    here = os.path.abspath(__file__)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(here))))
    path = os.pathsep.join(p for p in (pkg_parent, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    request = json.dumps(
        {"pid": pid, "info": [list(info.version), info.lib_path, info.shared], "boot": inner_boot}
    )
    try:
        out = subprocess.run(
            [sys.executable, "-m", HELPER_MODULE, HELPER_FLAG],
            input=request, capture_output=True, text=True, timeout=30, env=env,
            start_new_session=True, check=False,
        )  # fmt: skip
        fields = json.loads(out.stdout.strip().splitlines()[-1])
        return InjectResult(**fields)
    except subprocess.TimeoutExpired:
        return InjectResult(
            False, kind=FAILED, reason="the ptrace helper did not finish in 30 s", method="ptrace"
        )
    except (OSError, ValueError, IndexError, TypeError) as exc:
        return InjectResult(
            False, kind=FAILED, reason=f"the ptrace helper failed: {exc}", method="ptrace"
        )


def session_main() -> int:
    """``python -m infertop.agent.inject --ptrace-session``: one request on stdin, the result
    as one JSON line on stdout."""
    req = json.loads(sys.stdin.read())
    version, lib_path, shared = req["info"]
    info = PythonInfo(tuple(version), lib_path, bool(shared))
    try:
        result = session(int(req["pid"]), info, req["boot"])
    except Exception as exc:  # noqa: BLE001 - never a traceback on the wire
        result = InjectResult(
            False, kind=FAILED, reason=f"ptrace injection failed: {exc!r}", method="ptrace"
        )
    print(json.dumps(dataclasses.asdict(result)))
    return 0


def _result(ok: bool, kind: str, reason: str, **kw: object) -> InjectResult:
    return InjectResult(
        ok, kind=kind, reason=reason, method="ptrace", **kw  # type: ignore[arg-type]
    )


def session(pid: int, info: PythonInfo, inner_boot: str) -> InjectResult:
    """The pending call, made from this process: mmap a page in the target, write the
    bootstrap there, call ``Py_AddPendingCall``, restore the thread and detach."""
    why = tracee.supported()
    if why is not None:
        return _result(False, UNSUPPORTED, why)
    try:
        maps = procfs.maps(pid)
        py = elf.resolve(pid, info.lib_path, {"Py_AddPendingCall", "PyRun_SimpleString"}, maps)
        libc_path = next(
            (
                m.path
                for m in maps
                if re.match(r"(libc\.so|libc-[\d.]+\.so|ld-musl)", os.path.basename(m.path))
            ),
            None,
        )
        libc = elf.resolve(pid, libc_path, {"mmap", "munmap"}, maps) if libc_path else {}
    except PermissionError:
        return _result(False, DENIED, "cannot read the target's libraries; " + PTRACE_HINT)
    except (OSError, tracee.PtraceError) as exc:
        return _result(False, FAILED, f"cannot find the Python C API in pid {pid}: {exc}")
    missing = {"Py_AddPendingCall", "PyRun_SimpleString"} - set(py)
    if missing:
        reason = "the target's Python lacks " + ", ".join(sorted(missing))
        return _result(False, UNSUPPORTED, reason)
    if "mmap" not in libc:
        return _result(False, UNSUPPORTED, "cannot find mmap in the target's C library")

    thread = tracee.Tracee(pid)
    try:
        thread.attach()
    except tracee.PtraceError as exc:
        if exc.errno in (1, 13):  # EPERM, EACCES
            return _result(False, DENIED, f"ptrace is not permitted on pid {pid}: {PTRACE_HINT}")
        return _result(False, FAILED, f"cannot stop pid {pid}'s main thread: {exc}")
    except OSError as exc:
        return _result(False, FAILED, f"cannot stop pid {pid}'s main thread: {exc}")
    try:
        size = 4096
        # RW, PRIVATE|ANON
        addr = thread.call(libc["mmap"], 0, size, 0x3, 0x22, 0xFFFFFFFFFFFFFFFF, 0, timeout=1.0)
        if addr >= 0xFFFFFFFFFFFFF000 or addr == 0:
            raise tracee.PtraceError(f"mmap in the target failed ({addr:#x})")
        boot = bootstrap(inner_boot, f"{addr:#x}", size, "munmap")
        data = boot.encode("ascii") + b"\0"
        if len(data) > size:
            raise tracee.PtraceError("bootstrap too long")
        thread.write(addr, data)
        rc = thread.call(py["Py_AddPendingCall"], py["PyRun_SimpleString"], addr, timeout=1.0)
        if rc & 0xFFFFFFFF:
            if "munmap" in libc:
                thread.call(libc["munmap"], addr, size, timeout=1.0)
            raise tracee.PtraceError("Py_AddPendingCall refused the call (its queue is full)")
    except tracee.CallTimeout as exc:
        thread.detach()
        return _result(False, TIMEOUT, f"pid {pid}: {exc}", freeze_s=thread.frozen_s)
    except (OSError, tracee.PtraceError) as exc:
        thread.detach()
        reason = f"injection into pid {pid} failed: {exc}"
        return _result(False, FAILED, reason, freeze_s=thread.frozen_s)
    thread.detach()
    return InjectResult(True, method="ptrace", freeze_s=thread.frozen_s)
