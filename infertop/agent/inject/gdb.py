"""Transport for Python <= 3.13 through gdb (``method="gdb"``, and the default off x86-64): gdb
attaches, maps a page for the bootstrap, calls ``Py_AddPendingCall(PyRun_SimpleString, page)``
and detaches. It holds every thread of the target meanwhile (~0.3 s here).

gdb < 15 cannot make the call on CPUs with AMX (it restores registers with a too-small XSAVE
buffer), so it is not tried there.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import time

from infertop import procfs
from infertop.agent import protocol
from infertop.agent.inject.boot import bootstrap, remove
from infertop.agent.inject.result import (
    DENIED,
    FAILED,
    NO_TOOL,
    PTRACE_HINT,
    UNSUPPORTED,
    InjectResult,
    PythonInfo,
)

GDB_FLAGS = [
    "-batch",
    "-nx",
    "-iex",
    "set auto-solib-add off",
    "-iex",
    "set debuginfod enabled off",
    "-iex",
    "set auto-load off",
]


def find_gdb() -> str | None:
    return os.environ.get("INFERTOP_GDB") or shutil.which("gdb")


def gdb_escape(text: str) -> str:
    """Escape ``text`` for a string literal inside gdb's ``eval "..."`` format string."""
    return (
        text.replace("\\", "\\\\\\\\")
        .replace('"', '\\\\\\"')
        .replace("\n", "\\\\n")
        .replace("%", "%%")
    )


GDB_MMAP = "((void *(*)(void *, unsigned long, int, int, int, long)) mmap)"
GDB_PAGE = 4096
ADDRESS = "%#018lx"  # gdb's printf format of the page's address: 18 characters


def gdb_script(info: PythonInfo, inner_boot: str) -> tuple[str, int]:
    """The gdb command file, and the length of the bootstrap it writes.

    The bootstrap goes into a page from ``mmap`` (a plain system call: calling ``malloc`` could
    deadlock on an allocator lock the interrupted thread holds), which the payload unmaps.
    """
    boot = bootstrap(inner_boot, ADDRESS, GDB_PAGE, "munmap")
    length = len(boot.replace(ADDRESS, "0x" + "0" * 16)) + 1  # the address: 18 characters
    # eval's format: the address goes in through %#018lx, so protect everything else
    literal = gdb_escape(boot).replace("%" + ADDRESS, ADDRESS)
    lines = ["set pagination off", "set confirm off"]
    if info.shared:
        lines.append("sharedlibrary libpython3")
    lines += [
        "sharedlibrary libc\\.so",
        f"set $infertop_p = (char *) {GDB_MMAP}(0, {GDB_PAGE:d}, 3, 0x22, -1, 0)",
        "if $infertop_p == 0 || $infertop_p == (char *) -1",
        "  echo INFERTOP_ERROR mmap\\n",
        "  detach",
        "  quit",
        "end",
        f'eval "set {{char[%d]}} $infertop_p = \\"{literal}\\"", {length:d}, $infertop_p',
        (
            "set $infertop_r = (int) Py_AddPendingCall((int (*)(void *)) PyRun_SimpleString, "
            "(void *) $infertop_p)"
        ),
        'printf "INFERTOP_RESULT %d %lu\\n", $infertop_r, $infertop_p',
        "detach",
        "quit",
    ]
    return "\n".join(lines) + "\n", length


def gdb_version(gdb: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [gdb, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"(\d+)\.(\d+)", out.splitlines()[0] if out else "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def cpu_has_amx() -> bool:
    return "amx_tile" in procfs.cpu_flags()


def via_gdb(pid: int, info: PythonInfo, inner_boot: str) -> InjectResult:
    gdb = find_gdb()
    if gdb is not None and cpu_has_amx() and (gdb_version(gdb) or (0, 0)) < (15, 0):
        # gdb < 15 restores registers with a too-small XSAVE buffer on AMX CPUs: the call may
        # run and the interrupted thread's vector registers then stay clobbered. Never try.
        version = ".".join(map(str, gdb_version(gdb) or ("?",)))
        return InjectResult(
            False,
            kind=UNSUPPORTED,
            reason=f"gdb {version} cannot safely call functions in a process on this CPU (AMX: "
            "it cannot restore the full register state); use the built-in injector (the "
            "default on x86-64) or gdb 15+",
            method="gdb",
        )
    if gdb is None:
        return InjectResult(
            False,
            kind=NO_TOOL,
            reason="gdb is not installed: it is needed to inject into Python "
            f"{info.version[0]:d}.{info.version[1]:d} on this machine (apt install gdb / dnf "
            "install gdb), or start the target with INFERTOP_AGENT=1",
            method="gdb",
        )
    script, _length = gdb_script(info, inner_boot)
    name = f"infertop-gdb-{pid:d}-{secrets.token_hex(4)}.gdb"
    script_path = os.path.join(os.path.dirname(protocol.socket_dir()), name)
    fd = os.open(script_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(script)
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [gdb, "-p", str(pid), *GDB_FLAGS, "-x", script_path],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        out = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        procfs.resume_if_stopped(pid)  # a killed gdb can leave the target stopped
        reason = "gdb did not finish within 60 s"
        return InjectResult(False, kind=FAILED, reason=reason, method="gdb")
    except OSError as exc:
        return InjectResult(False, kind=NO_TOOL, reason=f"cannot run gdb: {exc}", method="gdb")
    finally:
        remove(script_path)
    freeze = time.monotonic() - start
    procfs.resume_if_stopped(pid)
    match = re.search(r"INFERTOP_RESULT (-?\d+) (\d+)", out)
    if match and int(match.group(1)) == 0:
        return InjectResult(True, method="gdb", freeze_s=freeze)
    if "Couldn't write extended state status" in out:
        reason = (
            "gdb cannot call functions in the target on this CPU (gdb < 15 and AMX: \"Couldn't "
            "write extended state status\"); use the built-in injector (the default on x86-64)"
        )
    elif "ptrace: Operation not permitted" in out:
        reason = f"gdb may not attach to pid {pid:d}: {PTRACE_HINT}"
        return InjectResult(False, kind=DENIED, reason=reason, method="gdb", freeze_s=freeze)
    elif match:
        reason = f"Py_AddPendingCall refused the call ({match.group(1)})"
    else:
        tail = [line for line in out.strip().splitlines() if line.strip()][-3:]
        reason = "gdb failed: " + " | ".join(tail)
    return InjectResult(False, kind=FAILED, reason=reason, method="gdb", freeze_s=freeze)
