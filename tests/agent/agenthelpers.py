"""Helpers for the agent tests: real target processes, a small protocol client, /proc readings.

(A module with a unique name, not conftest.py, so that test modules can import it safely.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TARGETS = HERE / "targets"
VENV_PY = sys.executable
SITE_PACKAGES = next(p for p in sys.path if p.endswith("site-packages"))
PYENV = Path("/root/.pyenv/versions")

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from infertop.agent import protocol as P  # noqa: E402
from infertop.collect.thread_cpu import thread_cpu_ns  # noqa: E402


def pyenv_python(version: str) -> str | None:
    """The pyenv interpreter for ``3.X`` (any patch level), if installed."""
    if not PYENV.is_dir():
        return None
    for d in sorted(PYENV.iterdir(), reverse=True):
        if d.name.startswith(version + "."):
            exe = d / "bin" / "python"
            if exe.exists():
                return str(exe)
    return None


def static_python() -> str | None:
    """A CPython 3.11 whose C API is linked into the executable (no libpython3*.so), which can
    import the venv's torch (same ABI): Debian's /usr/bin/python3.11."""
    exe = "/usr/bin/python3.11"
    if not os.path.exists(exe) or sys.version_info[:2] != (3, 11):
        return None
    out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    return None if "libpython" in out else exe


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INFERTOP_", "KINETO_"))}
    env.update(extra)
    return env


@dataclass
class Target:
    proc: subprocess.Popen
    status: str  # the JSON file the target rewrites every 0.1 s
    out: str = ""
    err: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read_status(self) -> dict:
        for _ in range(200):
            try:
                with open(self.status) as fh:
                    return json.load(fh)
            except (OSError, ValueError):
                time.sleep(0.02)
        raise AssertionError("target wrote no status to %s" % self.status)

    def rate(self, seconds: float, key: str = "main") -> float:
        a = self.read_status()
        time.sleep(seconds)
        b = self.read_status()
        return (b[key] - a[key]) / max(b["t"] - a["t"], 1e-6)

    def work_per_cpu_s(self, seconds: float, key: str = "main") -> float:
        """Iterations per second of CPU the whole process used, over a window of ``seconds``:
        what a hook or a thread left behind would lower, and what a busy machine does not
        (a wall-clock rate halves when another process takes the core)."""
        a, cpu_a = self.read_status(), sum(thread_cpu_ns([self.pid]).values())
        time.sleep(seconds)
        b, cpu_b = self.read_status(), sum(thread_cpu_ns([self.pid]).values())
        return (b[key] - a[key]) / max((cpu_b - cpu_a) / 1e9, 1e-6)

    def stop(self) -> tuple[str, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        self.out, self.err = out, err
        return out, err


def start_target(
    tmp_path: Path,
    script: str = "torch_loop.py",
    args: tuple[str, ...] = (),
    python: str = VENV_PY,
    env: dict[str, str] | None = None,
    status_flag: str | None = None,
    ready_key: str | None = None,
    prefix: list[str] | None = None,
    status_dir: str | None = None,
    argv0: str | None = None,
) -> Target:
    status = os.path.join(status_dir or str(tmp_path), "status-%d.json" % time.monotonic_ns())
    flag = status_flag or ("--counter" if script == "torch_loop.py" else "--status")
    if argv0 is not None:  # the interpreter finds its venv by its name: tell it
        env = {**(env if env is not None else clean_env()), "PYTHONEXECUTABLE": python}
    proc = subprocess.Popen(
        [argv0 or python, *(prefix or []), str(TARGETS / script), flag, status, *args],
        executable=python,  # argv0: what its command line says it is (a Ray worker's title)
        cwd=str(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env if env is not None else clean_env(),
    )
    target = Target(proc, status)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError("target exited early (%s): %s %s" % (proc.returncode, out, err))
        if os.path.exists(status):
            st = target.read_status()
            if ready_key is None or ready_key in st:
                return target
        time.sleep(0.05)
    target.stop()
    raise AssertionError("target never became ready")


class Client:
    """A minimal protocol client (the real one lives in infertop/collect/agent/client.py)."""

    def __init__(self, path: str, timeout: float = 15.0) -> None:
        self.sock = P.connect(path, timeout=timeout)
        self.pushed: list[dict] = []

    def call(self, cmd: str, **fields) -> dict:
        P.send_msg(self.sock, {"cmd": cmd, **fields})
        while True:
            msg = P.recv_msg(self.sock)
            if msg.get("type") in ("ok", "error", "hello"):
                return msg
            self.pushed.append(msg)

    def wait_for(self, kind: str, timeout: float = 15.0, predicate=None) -> dict:
        for i, msg in enumerate(self.pushed):
            if msg.get("type") == kind and (predicate is None or predicate(msg)):
                return self.pushed.pop(i)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = P.recv_msg(self.sock)
            except P.MessageTimeout as exc:
                if exc.partial:
                    raise
                continue
            if msg.get("type") == kind and (predicate is None or predicate(msg)):
                return msg
            self.pushed.append(msg)
        raise AssertionError("no %s message within %.0f s (got %s)" % (
            kind, timeout, [m.get("type") for m in self.pushed]))

    def close(self) -> None:
        self.sock.close()


def threads(pid: int) -> set[int]:
    return {int(t) for t in os.listdir("/proc/%d/task" % pid)}


def named(pid: int, tids: set[int]) -> dict[int, str]:
    """Threads of ``pid`` by their names (``comm``) and their Python stacks where py-spy finds
    them (none: a native thread, torch's or the C library's), for a failure that finds one too
    many."""
    from infertop.collect.target import find_pyspy

    try:
        dump = subprocess.run([find_pyspy(), "dump", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=30).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        dump = f"(py-spy dump: {exc})"
    out = {}
    for tid in tids:
        try:
            with open("/proc/%d/task/%d/comm" % (pid, tid)) as fh:
                out[tid] = fh.read().strip()
        except OSError:
            out[tid] = "(gone)"
            continue
        block = [b for b in dump.split("\nThread ") if b.split(" ", 1)[0] in (str(tid), hex(tid))]
        out[tid] += " Thread " + block[0] if block else " (no Python stack: a native thread)"
    return out


def fds(pid: int) -> int:
    """The process's open descriptors, less a test target's status file while it rewrites it
    (every 0.1 s it opens ``status-*.json.tmp`` and replaces the file: a reading landing inside
    that write, likelier on a loaded machine, would count one descriptor more)."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)).endswith(".json.tmp"):
                continue
        except OSError:
            continue  # closed while we read
        n += 1
    return n


def sockets(pid: int) -> int:
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


def rss_kb(pid: int) -> int:
    with open("/proc/%d/status" % pid) as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def settled(read, quiet_s: float = 1.0, timeout: float = 30.0):
    """``read()`` once it has given the same value for ``quiet_s`` (a target still starting
    threads or opening files has no base yet); the last value if it never settles in time."""
    value, since, deadline = read(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        time.sleep(0.05)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
    return value


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def kineto_threads(pid: int, tids: set[int]) -> set[int]:
    """Which of ``tids`` run libkineto's config loader (torch's own, process-lifetime thread).

    Reads the threads' stacks with gdb (reading only: no function is called in the target).
    """
    gdb = shutil.which("gdb")
    if gdb is None or not tids:
        return set()
    out = subprocess.run(
        [gdb, "-p", str(pid), "-batch", "-nx", "-iex", "set debuginfod enabled off",
         "-ex", "thread apply all bt 12"],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    found = set()
    for block in out.split("\nThread ")[1:]:
        head = block.split("\n", 1)[0]
        for tid in tids:
            if "LWP %d)" % tid in head and "libkineto::ConfigLoader" in block:
                found.add(tid)
    return found
