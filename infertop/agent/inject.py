"""Getting the agent into a running Python process: ``inject(pid) -> InjectResult``.

Tried in order:

1. an agent already listening in the target (armed at start-up, or still there) is used as is;
2. refusals: another user's process (unless we are root), a process that is not Python (or a
   Python older than 3.8), torch not imported yet (``/proc/PID/maps`` has no libtorch);
3. Python >= 3.14: ``sys.remote_exec(pid, file)`` (from this interpreter if it has it, else
   from the target's own interpreter binary);
4. Python <= 3.13: a pending call, ``Py_AddPendingCall(PyRun_SimpleString, bootstrap)``, so the
   payload runs on the target's main thread at a safe point of its eval loop. The call is made
   with the built-in ptrace caller (``_ptrace.py``, x86-64; it stops only the main thread, for
   milliseconds) or with gdb (``method="gdb"``, and the default on other architectures).

The bootstrap written into the target is ~250 bytes::

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
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

from infertop.agent import protocol

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


def _fail(kind: str, reason: str, t0: float, **kw: object) -> InjectResult:
    return InjectResult(False, kind=kind, reason=reason, elapsed_s=time.monotonic() - t0, **kw)  # type: ignore[arg-type]


def _status(pid: int) -> dict[str, list[str]]:
    return protocol._proc_status(pid)


def target_uid(pid: int) -> tuple[int, int]:
    """(effective uid, effective gid) of ``pid``."""
    st = _status(pid)
    return int(st["Uid"][1]), int(st["Gid"][1])


def has_torch(pid: int) -> bool:
    with open("/proc/%d/maps" % pid, "r", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if "libtorch" in line:
                return True
    return False


_LIBPY = re.compile(r"/libpython(\d)\.(\d+)[a-z]*\.so")
_EXEPY = re.compile(r"python(\d)\.(\d+)")


def python_info(pid: int) -> PythonInfo | None:
    """Which Python runs in ``pid`` and where its C API lives; None if it is not Python."""
    from infertop.agent import _ptrace

    maps = _ptrace.read_maps(pid)
    for m in maps:
        match = _LIBPY.search(m.path)
        if match:
            return PythonInfo((int(match.group(1)), int(match.group(2))), m.path, True)
    try:
        exe = os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return None
    exe_maps = [m for m in maps if m.path == exe]
    if not exe_maps:
        return None
    local = "/proc/%d/root%s" % (pid, exe)
    if not os.path.exists(local):
        local = exe
    try:
        syms = _ptrace.elf_symbols(local, {"Py_AddPendingCall", "Py_Version", "PyRun_SimpleString"})
    except (OSError, _ptrace.PtraceError):
        return None
    if "Py_AddPendingCall" not in syms:
        return None
    version = None
    match = _EXEPY.search(os.path.basename(exe))
    if match:
        version = (int(match.group(1)), int(match.group(2)))
    if "Py_Version" in syms:
        try:
            bias = _ptrace.load_bias(local, exe, maps)
            with open("/proc/%d/mem" % pid, "rb", buffering=0) as mem:
                mem.seek(bias + syms["Py_Version"][0])
                hexversion = int.from_bytes(mem.read(4), "little")
            version = ((hexversion >> 24) & 0xFF, (hexversion >> 16) & 0xFF)
        except (OSError, ValueError, _ptrace.PtraceError):
            pass
    if version is None:
        return None
    return PythonInfo(version, exe, False)


def probe_agent(path: str, timeout: float = 1.0) -> dict | None:
    """The hello of an agent listening at ``path`` (or its error reply when it is busy with
    another client); ``{"type": "silent"}`` when something listens there but gave no usable
    answer in time; None when nothing listens (no socket, or a stale one).

    Saying hello is harmless: only a client that configured or started something ends an
    injected agent's session by leaving.
    """
    try:
        sock = protocol.connect(path, timeout=timeout)
    except OSError:
        return None
    try:
        try:
            protocol.send_msg(sock, {"cmd": "hello", "client": "infertop-inject"})
        except protocol.ProtocolError:
            pass  # a busy agent answers and closes at once, maybe before our hello: read it
        reply = protocol.recv_msg(sock)
        return reply if reply.get("type") in ("hello", "error") else {"type": "silent"}
    except protocol.ProtocolError:
        # a live listener that said nothing usable (busy stopping a window, closing on us, a
        # slow start): an agent is there, so never inject a second one beside it
        return {"type": "silent"}
    finally:
        sock.close()


def _bootstrap(boot_file: str, address: str, size: int, free_how: str) -> str:
    """The few lines PyRun_SimpleString runs on the main thread (they bind no names in
    ``__main__`` and cannot raise)."""
    if any(c in boot_file for c in '"\\\n%'):
        raise ValueError("unusable boot file path %r" % boot_file)
    return (
        "try:\n"
        ' exec(compile(open("%s","rb").read(),"<infertop-agent>","exec"),'
        '{"__name__":"_infertop_agent","_infertop_free":(%s,%d,"%s")})\n'
        "except BaseException:\n"
        " pass\n"
    ) % (boot_file, address, size, free_how)


def _write_boot_file(path: str, source: str, uid: int, gid: int) -> None:
    """Create the boot file inside the checked socket directory, and only there: the directory
    is opened once without following a link and checked on that open handle, and the file is
    created relative to it, so its owner (another user, when root injects) cannot swap the
    directory for a link between the check and the write."""
    import stat

    dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        st = os.fstat(dfd)
        if st.st_uid != uid or stat.S_IMODE(st.st_mode) != 0o700:
            raise OSError("%s changed under us (owner or mode)" % os.path.dirname(path))
        fd = os.open(os.path.basename(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o600, dir_fd=dfd)  # fmt: skip
    finally:
        os.close(dfd)
    try:
        os.write(fd, source.encode("utf-8"))
        if os.geteuid() != uid:
            os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def _remove(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


def _wait_socket(path: str, deadline: float, pid: int) -> bool:
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        if not os.path.exists("/proc/%d" % pid):
            return False
        time.sleep(0.02)
    return os.path.exists(path)


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
    except Exception as exc:  # pragma: no cover - last resort: a reason, never a traceback
        return _fail(FAILED, "injection failed: %s" % (exc,), t0)


def _inject(
    pid: int, timeout: float, method: str, require_torch: bool, idle_exit_s: float, t0: float
) -> InjectResult:
    if pid <= 0 or not os.path.exists("/proc/%d" % pid):
        return _fail(NOT_FOUND, "no process with pid %d" % pid, t0)
    try:
        uid, gid = target_uid(pid)
    except (OSError, KeyError, ValueError, IndexError):
        return _fail(NOT_FOUND, "no process with pid %d" % pid, t0)
    me = os.geteuid()

    # 1. an agent already listening
    try:
        path = protocol.locate_socket(pid)
    except (OSError, KeyError, ValueError, IndexError):
        path = protocol.socket_path(pid, uid)
    if os.path.exists(path):
        hello = probe_agent(path)
        if hello is not None and hello.get("type") == "silent":
            hello = probe_agent(path, timeout=max(1.0, min(timeout, 10.0)))
        if hello is not None and hello.get("type") == "silent":
            return _fail(
                BUSY,
                "pid %d already has an agent, which did not answer in time (busy with a "
                "profiler window?); try again in a few seconds" % pid,
                t0,
            )
        if hello is not None and hello.get("type") == "error":
            return _fail(
                BUSY,
                "pid %d already has an agent serving another client (another infertop is "
                "attached): %s" % (pid, hello.get("message")),
                t0,
            )
        if hello is not None and hello.get("pid") is not None:
            return InjectResult(
                True,
                socket_path=path,
                method="armed" if hello.get("armed") else "existing",
                python=hello.get("python"),
                elapsed_s=time.monotonic() - t0,
            )

    # 2. refusals
    state = _proc_state(pid)
    if state in ("Z", "X"):
        return _fail(NOT_FOUND, "pid %d has exited" % pid, t0)
    if _stays_stopped(pid):
        return _fail(
            UNSUPPORTED, "pid %d is stopped (SIGSTOP or a debugger); resume it first" % pid, t0
        )
    if me != 0 and me != uid:
        return _fail(
            DENIED,
            "pid %d belongs to uid %d; infertop runs as uid %d and injects only into its own "
            "user's processes" % (pid, uid, me),
            t0,
        )
    try:
        info = python_info(pid)
    except PermissionError:
        return _fail(DENIED, "cannot read /proc/%d/maps: permission denied; %s" % (pid, PTRACE_HINT), t0)
    except OSError as exc:
        return _fail(NOT_FOUND, "cannot inspect pid %d: %s" % (pid, exc.strerror or exc), t0)
    if info is None:
        return _fail(UNSUPPORTED, "pid %d is not a Python process (no libpython, no Python C API)" % pid, t0)
    version = "%d.%d" % info.version
    if info.version < MIN_PYTHON:
        return _fail(UNSUPPORTED, "Python %s is too old for the agent (needs 3.8+)" % version, t0, python=version)
    if require_torch:
        try:
            torch_loaded = has_torch(pid)
        except OSError as exc:
            return _fail(DENIED, "cannot read /proc/%d/maps: %s" % (pid, exc.strerror or exc), t0)
        if not torch_loaded:
            return _fail(
                NO_TORCH,
                "torch is not imported yet in pid %d; nothing injected (attach again once the "
                "model is loaded)" % pid,
                t0,
                python=version,
            )

    # 3./4. get the payload in
    try:
        socket_dir = protocol.ensure_socket_dir(uid, gid, root=_root_prefix(pid))
    except protocol.UnsafeSocketDir as exc:
        return _fail(DENIED, "unsafe socket directory: %s" % exc, t0, python=version)
    boot_file = os.path.join(socket_dir, "boot-%d-%s.py" % (pid, secrets.token_hex(6)))
    inner_boot = boot_file[len(_root_prefix(pid)) :]
    deadline = time.time() + timeout
    source = _payload(deadline, inner_boot, idle_exit_s)
    try:
        _write_boot_file(boot_file, source, uid, gid)
    except OSError as exc:
        return _fail(FAILED, "cannot write %s: %s" % (boot_file, exc.strerror or exc), t0, python=version)

    chosen = (os.environ.get("INFERTOP_INJECT") or method or "auto").lower()
    try:
        if info.version >= (3, 14) and chosen == "auto":
            result = _via_remote_exec(pid, boot_file, inner_boot)
        else:
            if chosen == "auto":
                from infertop.agent import _ptrace

                chosen = "ptrace" if _ptrace.supported() is None else "gdb"
            if chosen == "ptrace":
                result = _via_ptrace(pid, info, inner_boot)
            elif chosen == "gdb":
                result = _via_gdb(pid, info, inner_boot)
            else:
                result = _fail(FAILED, "unknown injection method %r" % chosen, t0)
        if not result.ok:
            _remove(boot_file)
            if _proc_state(pid) in ("Z", "X", "?"):  # it died under us: say that, not the symptom
                return _fail(NOT_FOUND, "pid %d exited during injection" % pid, t0, python=version)
            result.elapsed_s = time.monotonic() - t0
            result.python = version
            return result
        wait_until = t0 + timeout + 1.0  # the payload checks the deadline before it binds
        if _wait_socket(path, wait_until, pid):
            result.socket_path = path
            result.python = version
            result.elapsed_s = time.monotonic() - t0
            return result
        if not os.path.exists("/proc/%d" % pid):
            return _fail(NOT_FOUND, "pid %d exited during injection" % pid, t0, python=version)
        return _fail(
            TIMEOUT,
            "the target's main thread did not reach a safe point within %.1f s (is it blocked "
            "in a long C call, or not running Python code?); nothing was left running in it"
            % timeout,
            t0,
            python=version,
            method=result.method,
            freeze_s=result.freeze_s,
        )
    finally:
        _remove(boot_file)
        try:
            os.rmdir(socket_dir)  # only if empty: nothing of ours stays behind a failure
        except OSError:
            pass


def _proc_state(pid: int) -> str:
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def _stays_stopped(pid: int, look_s: float = 0.2) -> bool:
    """Stopped for good (SIGSTOP, a debugger at a breakpoint), not just for one of py-spy's
    samples: a sampler stops the target for about a millisecond every 10 ms, so one look at
    /proc can catch it; a process that is stopped at every look over ``look_s`` is stopped."""
    deadline = time.monotonic() + look_s
    while True:
        if _proc_state(pid) not in ("T", "t"):
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.005)


def _root_prefix(pid: int) -> str:
    """``/proc/PID/root`` when the target lives in another mount namespace (a container)."""
    root = "/proc/%d/root" % pid
    try:
        a, b = os.stat(root + "/"), os.stat("/")
        if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
            return root
    except OSError:
        pass
    return ""


def _payload(deadline: float, boot_file: str, idle_exit_s: float) -> str:
    from infertop.agent.payload import payload_source

    return payload_source(
        mode="injected",
        deadline=deadline,
        boot_file=boot_file,
        idle_exit_s=idle_exit_s,
        free_region_from_bootstrap=True,
    )


# ---------------------------------------------------------------------------------------------
# sys.remote_exec (Python >= 3.14)


def _via_remote_exec(pid: int, boot_file: str, inner_boot: str) -> InjectResult:
    remote_exec = getattr(sys, "remote_exec", None)
    try:
        if remote_exec is not None:
            remote_exec(pid, inner_boot)
        else:
            exe = "/proc/%d/exe" % pid
            proc = subprocess.run(
                [exe, "-I", "-c", "import sys; sys.remote_exec(%d, %r)" % (pid, inner_boot)],
                capture_output=True,
                text=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
            )
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["failed"])[-1]
                return InjectResult(False, kind=FAILED, reason="sys.remote_exec: %s" % tail, method="remote_exec")
    except PermissionError as exc:
        return InjectResult(False, kind=DENIED, reason="sys.remote_exec: %s; %s" % (exc, PTRACE_HINT), method="remote_exec")
    except Exception as exc:
        return InjectResult(False, kind=FAILED, reason="sys.remote_exec: %s" % exc, method="remote_exec")
    return InjectResult(True, method="remote_exec")


# ---------------------------------------------------------------------------------------------
# the built-in ptrace caller (x86-64)


def _via_ptrace(pid: int, info: PythonInfo, inner_boot: str) -> InjectResult:
    """The ptrace session runs in a short-lived process of its own session: while it holds the
    target's main thread inside a call, only it can put the registers back, so it must outlive
    infertop being killed (SIGKILL, the OOM killer, a closed terminal). Killed mid-call, the
    thread would return to address 0 and the target die."""
    import json

    pkg_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (pkg_parent, os.environ.get("PYTHONPATH")) if p))
    request = json.dumps({"pid": pid, "info": [list(info.version), info.lib_path, info.shared], "boot": inner_boot})
    try:
        out = subprocess.run(
            [sys.executable, "-m", "infertop.agent.inject", "--ptrace-session"],
            input=request, capture_output=True, text=True, timeout=30, env=env,
            start_new_session=True,
        )  # fmt: skip
        fields = json.loads(out.stdout.strip().splitlines()[-1])
        return InjectResult(**fields)
    except subprocess.TimeoutExpired:
        return InjectResult(False, kind=FAILED, reason="the ptrace helper did not finish in 30 s", method="ptrace")
    except (OSError, ValueError, IndexError, TypeError) as exc:
        return InjectResult(False, kind=FAILED, reason="the ptrace helper failed: %s" % (exc,), method="ptrace")


def _ptrace_session_main() -> int:
    """``python -m infertop.agent.inject --ptrace-session``: one request on stdin, the result
    as one JSON line on stdout."""
    import dataclasses
    import json

    req = json.loads(sys.stdin.read())
    version, lib_path, shared = req["info"]
    info = PythonInfo(tuple(version), lib_path, bool(shared))  # type: ignore[arg-type]
    try:
        result = _ptrace_session(int(req["pid"]), info, req["boot"])
    except Exception as exc:  # never a traceback on the wire
        result = InjectResult(False, kind=FAILED, reason="ptrace injection failed: %r" % (exc,), method="ptrace")
    print(json.dumps(dataclasses.asdict(result)))
    return 0


def _ptrace_session(pid: int, info: PythonInfo, inner_boot: str) -> InjectResult:
    from infertop.agent import _ptrace

    why = _ptrace.supported()
    if why is not None:
        return InjectResult(False, kind=UNSUPPORTED, reason=why, method="ptrace")
    try:
        maps = _ptrace.read_maps(pid)
        py = _ptrace.resolve(pid, info.lib_path, {"Py_AddPendingCall", "PyRun_SimpleString"}, maps)
        libc_path = next(
            (
                m.path
                for m in maps
                if re.match(r"(libc\.so|libc-[\d.]+\.so|ld-musl)", os.path.basename(m.path))
            ),
            None,
        )
        libc = _ptrace.resolve(pid, libc_path, {"mmap", "munmap"}, maps) if libc_path else {}
    except PermissionError:
        return InjectResult(False, kind=DENIED, reason="cannot read the target's libraries; " + PTRACE_HINT, method="ptrace")
    except (OSError, _ptrace.PtraceError) as exc:
        return InjectResult(False, kind=FAILED, reason="cannot find the Python C API in pid %d: %s" % (pid, exc), method="ptrace")
    missing = {"Py_AddPendingCall", "PyRun_SimpleString"} - set(py)
    if missing:
        return InjectResult(False, kind=UNSUPPORTED, reason="the target's Python lacks %s" % ", ".join(sorted(missing)), method="ptrace")
    if "mmap" not in libc:
        return InjectResult(False, kind=UNSUPPORTED, reason="cannot find mmap in the target's C library", method="ptrace")

    tracee = _ptrace.Tracee(pid)
    try:
        tracee.attach()
    except _ptrace.PtraceError as exc:
        if exc.errno in (1, 13):  # EPERM, EACCES
            return InjectResult(False, kind=DENIED, reason="ptrace is not permitted on pid %d: %s" % (pid, PTRACE_HINT), method="ptrace")
        return InjectResult(False, kind=FAILED, reason="cannot stop pid %d's main thread: %s" % (pid, exc), method="ptrace")
    except OSError as exc:
        return InjectResult(False, kind=FAILED, reason="cannot stop pid %d's main thread: %s" % (pid, exc), method="ptrace")
    try:
        size = 4096
        addr = tracee.call(libc["mmap"], 0, size, 0x3, 0x22, 0xFFFFFFFFFFFFFFFF, 0, timeout=1.0)  # RW, PRIVATE|ANON
        if addr >= 0xFFFFFFFFFFFFF000 or addr == 0:
            raise _ptrace.PtraceError("mmap in the target failed (%#x)" % addr)
        boot = _bootstrap(inner_boot, "%#x" % addr, size, "munmap")
        data = boot.encode("ascii") + b"\0"
        if len(data) > size:
            raise _ptrace.PtraceError("bootstrap too long")
        tracee.write(addr, data)
        rc = tracee.call(py["Py_AddPendingCall"], py["PyRun_SimpleString"], addr, timeout=1.0)
        if rc & 0xFFFFFFFF:
            if "munmap" in libc:
                tracee.call(libc["munmap"], addr, size, timeout=1.0)
            raise _ptrace.PtraceError("Py_AddPendingCall refused the call (its queue is full)")
    except _ptrace.CallTimeout as exc:
        tracee.detach()
        return InjectResult(False, kind=TIMEOUT, reason="pid %d: %s" % (pid, exc), method="ptrace", freeze_s=tracee.frozen_s)
    except (OSError, _ptrace.PtraceError) as exc:
        tracee.detach()
        return InjectResult(False, kind=FAILED, reason="injection into pid %d failed: %s" % (pid, exc), method="ptrace", freeze_s=tracee.frozen_s)
    tracee.detach()
    return InjectResult(True, method="ptrace", freeze_s=tracee.frozen_s)


# ---------------------------------------------------------------------------------------------
# gdb


def find_gdb() -> str | None:
    return os.environ.get("INFERTOP_GDB") or shutil.which("gdb")


def _gdb_escape(text: str) -> str:
    """Escape ``text`` for a string literal inside gdb's ``eval "..."`` format string."""
    return text.replace("\\", "\\\\\\\\").replace('"', '\\\\\\"').replace("\n", "\\\\n").replace("%", "%%")


GDB_MMAP = "((void *(*)(void *, unsigned long, int, int, int, long)) mmap)"
GDB_PAGE = 4096


def gdb_script(info: PythonInfo, inner_boot: str) -> tuple[str, int]:
    """The gdb command file, and the length of the bootstrap it writes.

    The bootstrap goes into a page from ``mmap`` (a plain system call: calling ``malloc`` could
    deadlock on an allocator lock the interrupted thread holds), which the payload unmaps.
    """
    boot = _bootstrap(inner_boot, "%#018lx", GDB_PAGE, "munmap")
    length = len(boot.replace("%#018lx", "0x" + "0" * 16)) + 1  # the address: 18 characters
    # eval's format: the address goes in through %#018lx, so protect everything else
    literal = _gdb_escape(boot).replace("%%#018lx", "%#018lx")
    lines = ["set pagination off", "set confirm off"]
    if info.shared:
        lines.append("sharedlibrary libpython3")
    lines += [
        "sharedlibrary libc\\.so",
        "set $infertop_p = (char *) %s(0, %d, 3, 0x22, -1, 0)" % (GDB_MMAP, GDB_PAGE),
        "if $infertop_p == 0 || $infertop_p == (char *) -1",
        '  echo INFERTOP_ERROR mmap\\n',
        "  detach",
        "  quit",
        "end",
        'eval "set {char[%%d]} $infertop_p = \\"%s\\"", %d, $infertop_p' % (literal, length),
        "set $infertop_r = (int) Py_AddPendingCall((int (*)(void *)) PyRun_SimpleString, (void *) $infertop_p)",
        'printf "INFERTOP_RESULT %d %lu\\n", $infertop_r, $infertop_p',
        "detach",
        "quit",
    ]
    return "\n".join(lines) + "\n", length


def gdb_version(gdb: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([gdb, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"(\d+)\.(\d+)", out.splitlines()[0] if out else "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def cpu_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return "amx_tile" in line.split()
    except OSError:
        pass
    return False


def _via_gdb(pid: int, info: PythonInfo, inner_boot: str) -> InjectResult:
    gdb = find_gdb()
    if gdb is not None and cpu_has_amx() and (gdb_version(gdb) or (0, 0)) < (15, 0):
        # gdb < 15 restores registers with a too-small XSAVE buffer on AMX CPUs: the call may
        # run and the interrupted thread's vector registers then stay clobbered. Never try.
        return InjectResult(
            False,
            kind=UNSUPPORTED,
            reason="gdb %s cannot safely call functions in a process on this CPU (AMX: it cannot "
            "restore the full register state); use the built-in injector (the default on "
            "x86-64) or gdb 15+" % ".".join(map(str, gdb_version(gdb) or ("?",))),
            method="gdb",
        )
    if gdb is None:
        return InjectResult(
            False,
            kind=NO_TOOL,
            reason="gdb is not installed: it is needed to inject into Python %d.%d on this "
            "machine (apt install gdb / dnf install gdb), or start the target with "
            "INFERTOP_AGENT=1" % info.version,
            method="gdb",
        )
    script, _length = gdb_script(info, inner_boot)
    script_path = os.path.join(os.path.dirname(protocol.socket_dir()), "infertop-gdb-%d-%s.gdb" % (pid, secrets.token_hex(4)))
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
        )
        out = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or "") if isinstance(exc.stdout, str) else ""
        _resume_if_stopped(pid)
        return InjectResult(False, kind=FAILED, reason="gdb did not finish within 60 s", method="gdb")
    except OSError as exc:
        return InjectResult(False, kind=NO_TOOL, reason="cannot run gdb: %s" % exc, method="gdb")
    finally:
        _remove(script_path)
    freeze = time.monotonic() - start
    _resume_if_stopped(pid)
    match = re.search(r"INFERTOP_RESULT (-?\d+) (\d+)", out)
    if match and int(match.group(1)) == 0:
        return InjectResult(True, method="gdb", freeze_s=freeze)
    if "Couldn't write extended state status" in out:
        reason = (
            "gdb cannot call functions in the target on this CPU (gdb < 15 and AMX: \"Couldn't "
            "write extended state status\"); use the built-in injector (the default on x86-64)"
        )
    elif "ptrace: Operation not permitted" in out:
        return InjectResult(False, kind=DENIED, reason="gdb may not attach to pid %d: %s" % (pid, PTRACE_HINT), method="gdb", freeze_s=freeze)
    elif match:
        reason = "Py_AddPendingCall refused the call (%s)" % match.group(1)
    else:
        tail = [line for line in out.strip().splitlines() if line.strip()][-3:]
        reason = "gdb failed: %s" % " | ".join(tail)
    return InjectResult(False, kind=FAILED, reason=reason, method="gdb", freeze_s=freeze)


def _resume_if_stopped(pid: int) -> None:
    """A killed gdb can leave the target in a stopped state; wake it up."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        if state in ("T", "t"):
            os.kill(pid, 18)  # SIGCONT
    except (OSError, IndexError):
        pass


if __name__ == "__main__" and sys.argv[1:] == ["--ptrace-session"]:
    sys.exit(_ptrace_session_main())
