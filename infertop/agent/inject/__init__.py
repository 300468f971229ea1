"""Getting the agent into a running Python process: ``inject(pid) -> InjectResult``.

Tried in order (``orchestrate.py``):

1. an agent already listening in the target (armed at start-up, or still there) is used as is
   (``armed.py``);
2. refusals (``probe.py``): another user's process (unless we are root), a process that is not
   Python (or a Python older than 3.8), torch not imported yet (``/proc/PID/maps`` has no
   libtorch);
3. Python >= 3.14: ``sys.remote_exec(pid, file)`` (``remote_exec.py``; from this interpreter if
   it has it, else from the target's own interpreter binary);
4. Python <= 3.13: a pending call, ``Py_AddPendingCall(PyRun_SimpleString, bootstrap)``, so the
   payload runs on the target's main thread at a safe point of its eval loop. The call is made
   with the built-in ptrace caller (``ptrace.py`` with ``tracee.py`` and ``elf.py``, x86-64; it
   stops only the main thread, for milliseconds) or with gdb (``gdb.py``; ``method="gdb"``, and
   the default on other architectures).

The bootstrap written into the target is ~250 bytes (``boot.py``)::

    try:
     exec(compile(open("/tmp/infertop-UID/boot-PID-XXXX.py","rb").read(),...),
          {"__name__":"_infertop_agent","_infertop_free":(ADDR,SIZE,HOW)})
    except BaseException:
     pass

and the payload frees those bytes as its first act (``munmap`` of the page the ptrace caller or
gdb mapped with ``mmap``: a plain system call, where ``malloc`` could deadlock on an allocator
lock held by the interrupted thread; that happened with gdb here). The boot file (mode 0600, in the
private socket directory) carries a deadline: if the main thread reaches the pending call only
after ``inject`` gave up (it was blocked in a long C call), the file is gone or the deadline
passed and the bootstrap does nothing at all (the ~4 KiB page then stays mapped: the one leak,
documented).

Modules: ``result.py`` the result and its kinds; ``probe.py`` the target looked at;
``armed.py`` an agent already there; ``boot.py`` the boot file and the bootstrap; one module per
transport (``remote_exec.py``, ``ptrace.py``, ``gdb.py``); ``tracee.py`` the ptrace caller and
``elf.py`` the symbol lookup it needs; ``orchestrate.py`` the steps; ``__main__.py`` the ptrace
helper process.
"""

from __future__ import annotations

from infertop.agent.inject.armed import probe_agent
from infertop.agent.inject.gdb import (
    GDB_FLAGS,
    GDB_MMAP,
    GDB_PAGE,
    cpu_has_amx,
    find_gdb,
    gdb_script,
    gdb_version,
)
from infertop.agent.inject.orchestrate import inject
from infertop.agent.inject.probe import has_torch, python_info, target_uid
from infertop.agent.inject.result import (
    BUSY,
    DENIED,
    FAILED,
    MIN_PYTHON,
    NO_TOOL,
    NO_TORCH,
    NOT_FOUND,
    OK,
    PTRACE_HINT,
    TIMEOUT,
    UNSUPPORTED,
    InjectResult,
    PythonInfo,
)

__all__ = [
    "BUSY",
    "DENIED",
    "FAILED",
    "GDB_FLAGS",
    "GDB_MMAP",
    "GDB_PAGE",
    "MIN_PYTHON",
    "NOT_FOUND",
    "NO_TOOL",
    "NO_TORCH",
    "OK",
    "PTRACE_HINT",
    "TIMEOUT",
    "UNSUPPORTED",
    "InjectResult",
    "PythonInfo",
    "cpu_has_amx",
    "find_gdb",
    "gdb_script",
    "gdb_version",
    "has_torch",
    "inject",
    "probe_agent",
    "python_info",
    "target_uid",
]
