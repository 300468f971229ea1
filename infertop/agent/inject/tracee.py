"""Calling a function inside another process with ptrace (x86-64 Linux), without gdb.

Why not gdb: gdb 13 cannot make inferior calls on CPUs with AMX (Sapphire Rapids and newer):
it restores registers with a too-small XSAVE buffer and fails with "Couldn't write extended
state status: Bad address" (the kernel wants the full XSAVE size). This module saves and
restores the complete XSAVE area the kernel reports, so every register of the interrupted
thread comes back exactly as it was.

Only one thread (the one we call on, normally the main thread) is stopped, for a few
milliseconds; the other threads keep running. A call that does not return in time (e.g. a
lock the interrupted thread itself holds) is abandoned: the thread is interrupted again and its
registers restored, as if nothing had happened. Which address to call comes from ``elf.py``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import time

PTRACE_CONT = 7
PTRACE_DETACH = 17
PTRACE_GETREGS = 12
PTRACE_SETREGS = 13
PTRACE_GETFPREGS = 14
PTRACE_SETFPREGS = 15
PTRACE_GETREGSET = 0x4204
PTRACE_SETREGSET = 0x4205
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_EVENT_STOP = 128
#: how long a seize refused with EPERM is tried again (another tracer: py-spy holds every thread
#: for its sample, and on a busy machine may be descheduled while it does); a denial for good
#: (another user, Yama) is reported after this long
EPERM_PATIENCE_S = 2.0
NT_X86_XSTATE = 0x202
WALL = 0x40000000
SYS_TGKILL = 234
SIGSEGV = 11
SIGTRAP = 5
#: synchronous faults: during one of our calls they mean the call stopped (or crashed)
FAULT_SIGNALS = frozenset((4, 5, 7, 8, 11))  # SIGILL SIGTRAP SIGBUS SIGFPE SIGSEGV
XSTATE_BUF = 1 << 16

_REG_NAMES = (
    "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx",
    "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base", "gs_base", "ds",
    "es", "fs", "gs",
)  # struct user_regs_struct, in order


class UserRegs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_ulonglong) for name in _REG_NAMES]


class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class PtraceError(Exception):
    """Something went wrong; ``errno`` is set when a system call failed."""

    def __init__(self, message: str, err: int | None = None) -> None:
        super().__init__(message)
        self.errno = err


class CallTimeout(PtraceError):
    """The called function did not return in time; the call was abandoned cleanly."""


_libc = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        lib.ptrace.restype = ctypes.c_long
        lib.syscall.restype = ctypes.c_long
        _libc = lib
    return _libc


def supported() -> str | None:
    """Why this injector cannot run here (None when it can)."""
    machine = os.uname().machine
    if machine not in ("x86_64", "amd64"):
        return f"the built-in injector supports x86-64 only (this machine is {machine})"
    if struct.calcsize("P") != 8:
        return "the built-in injector needs a 64-bit Python"
    return None


def _ptrace(request: int, tid: int, addr: int = 0, data: int | ctypes.c_void_p | None = 0) -> int:
    lib = _lib()
    ctypes.set_errno(0)
    arg = data if isinstance(data, ctypes.c_void_p) else ctypes.c_void_p(data or 0)
    res = lib.ptrace(request, tid, ctypes.c_void_p(addr), arg)
    if res == -1:
        err = ctypes.get_errno()
        if err:
            raise PtraceError(f"ptrace({request:d}) on {tid:d}: {os.strerror(err)}", err)
    return res


# ---------------------------------------------------------------------------------------------
# one stopped thread


class Tracee:
    """A thread seized with PTRACE_SEIZE and interrupted; use as a context manager."""

    def __init__(self, pid: int, tid: int | None = None, stop_timeout: float = 2.0) -> None:
        self.pid = pid
        self.tid = tid if tid is not None else pid
        self.stop_timeout = stop_timeout
        self.attached = False
        self.saved_regs: UserRegs | None = None
        self.saved_xstate: bytes | None = None
        self.saved_fp: bytes | None = None
        self.pending_signals: list[int] = []
        self.mem_fd = -1
        self.stopped_at = 0.0
        self.frozen_s = 0.0

    # -- attach / detach ----------------------------------------------------------------------

    def __enter__(self) -> Tracee:  # noqa: PYI034 - never subclassed
        self.attach()
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def attach(self) -> None:
        # EPERM also while another tracer (py-spy taking a sample) holds the thread: it lets go
        # within a millisecond, often before /proc says it held it, so EPERM is tried again for
        # a while whatever /proc says; a denial for good (another user, Yama) costs that while.
        deadline = time.monotonic() + EPERM_PATIENCE_S
        while True:
            try:
                _ptrace(PTRACE_SEIZE, self.tid, 0, 0)
                break
            except PtraceError as exc:
                if exc.errno == errno.EPERM and time.monotonic() < deadline:
                    time.sleep(0.005)
                    continue
                raise
        self.attached = True
        try:
            _ptrace(PTRACE_INTERRUPT, self.tid, 0, 0)
            self._wait_stop(self.stop_timeout, want_interrupt=True)
            self.stopped_at = time.monotonic()
            self.saved_regs = self.get_regs()
            self._save_fpu()
            self.mem_fd = os.open(f"/proc/{self.pid:d}/mem", os.O_RDWR)
        except BaseException:
            self.detach()
            raise

    def detach(self) -> None:
        if not self.attached:
            return
        try:
            if self.saved_regs is not None:
                try:
                    self.set_regs(self.saved_regs)
                    self._restore_fpu()
                except PtraceError:
                    pass
            sig = self.pending_signals.pop(0) if self.pending_signals else 0
            try:
                _ptrace(PTRACE_DETACH, self.tid, 0, sig)
            except PtraceError:
                pass
            for other in self.pending_signals:
                _lib().syscall(SYS_TGKILL, self.pid, self.tid, other)
        finally:
            self.attached = False
            if self.stopped_at:
                self.frozen_s = time.monotonic() - self.stopped_at
            if self.mem_fd >= 0:
                os.close(self.mem_fd)
                self.mem_fd = -1

    def _wait_stop(self, timeout: float, want_interrupt: bool) -> tuple[int, int]:
        """Wait for the next ptrace-stop; returns (signal, event)."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status = os.waitpid(self.tid, WALL | os.WNOHANG)
            if pid == 0:
                if time.monotonic() > deadline:
                    raise CallTimeout(f"thread {self.tid:d} did not stop within {timeout:.1f} s")
                time.sleep(0.0005)
                continue
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                self.attached = False
                raise PtraceError("the target exited")
            if not os.WIFSTOPPED(status):
                continue
            sig = os.WSTOPSIG(status)
            event = (status >> 16) & 0xFF
            if event == PTRACE_EVENT_STOP:
                return sig, event
            if event:
                # another ptrace event (exec, clone...): let it go on
                _ptrace(PTRACE_CONT, self.tid, 0, 0)
                continue
            if not want_interrupt and sig in FAULT_SIGNALS:
                return sig, 0
            # a signal for the target arrived meanwhile: hold it, deliver it when we leave
            self.pending_signals.append(sig)
            _ptrace(PTRACE_CONT, self.tid, 0, 0)

    # -- registers and memory --------------------------------------------------------------------

    def get_regs(self) -> UserRegs:
        regs = UserRegs()
        _ptrace(PTRACE_GETREGS, self.tid, 0, ctypes.c_void_p(ctypes.addressof(regs)))
        return regs

    def set_regs(self, regs: UserRegs) -> None:
        _ptrace(PTRACE_SETREGS, self.tid, 0, ctypes.c_void_p(ctypes.addressof(regs)))

    def _save_fpu(self) -> None:
        buf = ctypes.create_string_buffer(XSTATE_BUF)
        iov = IoVec(ctypes.cast(buf, ctypes.c_void_p), XSTATE_BUF)
        try:
            iov_p = ctypes.c_void_p(ctypes.addressof(iov))
            _ptrace(PTRACE_GETREGSET, self.tid, NT_X86_XSTATE, iov_p)
            self.saved_xstate = buf.raw[: iov.iov_len]
            return
        except PtraceError:
            pass
        fp = ctypes.create_string_buffer(512)
        _ptrace(PTRACE_GETFPREGS, self.tid, 0, ctypes.c_void_p(ctypes.addressof(fp)))
        self.saved_fp = fp.raw

    def _restore_fpu(self) -> None:
        if self.saved_xstate is not None:
            buf = ctypes.create_string_buffer(self.saved_xstate, len(self.saved_xstate))
            iov = IoVec(ctypes.cast(buf, ctypes.c_void_p), len(self.saved_xstate))
            iov_p = ctypes.c_void_p(ctypes.addressof(iov))
            _ptrace(PTRACE_SETREGSET, self.tid, NT_X86_XSTATE, iov_p)
        elif self.saved_fp is not None:
            fp = ctypes.create_string_buffer(self.saved_fp, 512)
            _ptrace(PTRACE_SETFPREGS, self.tid, 0, ctypes.c_void_p(ctypes.addressof(fp)))

    def write(self, addr: int, data: bytes) -> None:
        written = os.pwrite(self.mem_fd, data, addr)
        if written != len(data):
            raise PtraceError(f"short write to {addr:#x}")

    def read(self, addr: int, size: int) -> bytes:
        return os.pread(self.mem_fd, size, addr)

    # -- calling --------------------------------------------------------------------------------

    def call(self, func: int, *args: int, timeout: float = 2.0) -> int:
        """Call ``func(*args)`` (up to 6 integer/pointer arguments) on the stopped thread."""
        if len(args) > 6:
            raise ValueError("at most 6 arguments")
        assert self.saved_regs is not None
        regs = UserRegs.from_buffer_copy(self.saved_regs)
        sp = (self.saved_regs.rsp - 512) & ~0xF  # below the red zone, 16-byte aligned
        sp -= 8  # return address: 0, so that the return faults and stops the thread
        self.write(sp, b"\0" * 8)
        for name, value in zip(("rdi", "rsi", "rdx", "rcx", "r8", "r9"), args):
            setattr(regs, name, value & 0xFFFFFFFFFFFFFFFF)
        regs.rsp = sp
        regs.rip = func
        regs.rax = 0
        regs.orig_rax = 0xFFFFFFFFFFFFFFFF  # not in a system call: no restart on resume
        self.set_regs(regs)
        _ptrace(PTRACE_CONT, self.tid, 0, 0)
        try:
            sig, _event = self._wait_stop(timeout, want_interrupt=False)
        except CallTimeout:
            # abandon the call: stop the thread again; detach() restores its registers
            _ptrace(PTRACE_INTERRUPT, self.tid, 0, 0)
            self._wait_stop(self.stop_timeout, want_interrupt=True)
            why = f"the call did not return within {timeout:.1f} s; abandoned"
            raise CallTimeout(why) from None
        after = self.get_regs()
        if sig == SIGSEGV and after.rip == 0:
            return after.rax
        raise PtraceError(
            f"the call stopped with signal {sig:d} at {after.rip:#x} instead of returning"
        )
