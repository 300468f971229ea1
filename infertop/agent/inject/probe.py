"""Looking at a target before anything is injected: whose it is, whether it is Python (which
version, where its C API lives), whether torch is loaded, whether it is stopped, and whether it
lives in a container. Only reads: ``/proc`` and the target's ELF files."""

from __future__ import annotations

import os
import re
import time

from infertop import procfs
from infertop.agent.inject import elf
from infertop.agent.inject.result import PythonInfo
from infertop.agent.inject.tracee import PtraceError


def target_uid(pid: int) -> tuple[int, int]:
    """(effective uid, effective gid) of ``pid``."""
    st = procfs.status(pid)
    return int(st["Uid"][1]), int(st["Gid"][1])


def has_torch(pid: int) -> bool:
    """Whether ``pid`` has libtorch mapped (OSError when its maps cannot be read)."""
    return any("libtorch" in m.path for m in procfs.maps(pid))


_LIBPY = re.compile(r"/libpython(\d)\.(\d+)[a-z]*\.so")
_EXEPY = re.compile(r"python(\d)\.(\d+)")


def python_info(pid: int) -> PythonInfo | None:
    """Which Python runs in ``pid`` and where its C API lives; None if it is not Python."""
    maps = procfs.maps(pid)
    for m in maps:
        match = _LIBPY.search(m.path)
        if match:
            return PythonInfo((int(match.group(1)), int(match.group(2))), m.path, True)
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    exe_maps = [m for m in maps if m.path == exe]
    if not exe_maps:
        return None
    local = f"/proc/{pid}/root{exe}"
    if not os.path.exists(local):
        local = exe
    try:
        syms = elf.elf_symbols(local, {"Py_AddPendingCall", "Py_Version", "PyRun_SimpleString"})
    except (OSError, PtraceError):
        return None
    if "Py_AddPendingCall" not in syms:
        return None
    version = None
    match = _EXEPY.search(os.path.basename(exe))
    if match:
        version = (int(match.group(1)), int(match.group(2)))
    if "Py_Version" in syms:
        try:
            bias = elf.load_bias(local, exe, maps)
            with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
                mem.seek(bias + syms["Py_Version"][0])
                hexversion = int.from_bytes(mem.read(4), "little")
            version = ((hexversion >> 24) & 0xFF, (hexversion >> 16) & 0xFF)
        except (OSError, ValueError, PtraceError):
            pass
    if version is None:
        return None
    return PythonInfo(version, exe, False)


def proc_state(pid: int) -> str:
    """The state letter of ``pid`` ("?" when it cannot be read: gone)."""
    return procfs.state(pid) or "?"


def stays_stopped(pid: int, look_s: float = 0.2) -> bool:
    """Stopped for good (SIGSTOP, a debugger at a breakpoint), not just for one of py-spy's
    samples: a sampler stops the target for about a millisecond every 10 ms, so one look at
    /proc can catch it; a process that is stopped at every look over ``look_s`` is stopped."""
    deadline = time.monotonic() + look_s
    while True:
        if proc_state(pid) not in ("T", "t"):
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.005)


def root_prefix(pid: int) -> str:
    """``/proc/PID/root`` when the target lives in another mount namespace (a container)."""
    root = f"/proc/{pid}/root"
    try:
        a, b = os.stat(root + "/"), os.stat("/")
        if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
            return root
    except OSError:
        pass
    return ""
