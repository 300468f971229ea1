"""py-spy collector: Python stacks of every thread, in short ``py-spy record`` windows.

py-spy writes its output only when it stops, so a live view runs it in back-to-back windows
(default 1 s, longer where py-spy is slow to start: ``START_SHARE``), each ended by py-spy's own
``--duration`` (SIGINT only to stop early), parsing its ``raw`` output (one line per unique
stack with a count).

Windows alternate between two kinds (``cpu_every``): *wall* windows run py-spy with ``--idle``,
so every thread's stack is there at every tick, idle or not; *CPU* windows leave idle threads
out (the session derives idle time from ticks × threads). py-spy's raw output does not say
which samples were idle, so neither kind alone gives both views; together they do
(``analysis/wall.py``).

CPU windows sample in blocking mode (the target's threads stopped for each sample): their
stacks feed the flame, the top frames and the exports, and ``--nonblocking`` tears stacks
(field notes). Wall windows sample with ``--nonblocking``: they only count stages, and the
stops bias them where a native thread pool runs beside the pipeline (measured on the
text-generation sample with the Rust tokenizer, 2,000 samples against perf_counter: queue
16.8 % against 12.0 %, forward 48.1 % against 52.5 % blocking; 14.3 / 13.3 and 53.7 / 53.3
non-blocking; docs/performance.md). A wall window costs the target no stops at all.

py-spy runs at normal priority; ``[collect] realtime = true`` makes it real-time while its
ticks come late (collect/priority.py: on a host whose cores are full they shift time into the
stage after the one that held them).
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import queue
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from infertop import procfs
from infertop.collect.base import drain
from infertop.collect.priority import SamplerPriority, make_realtime
from infertop.collect.target import classify_pyspy_failure, find_pyspy, pid_alive
from infertop.collect.thread_cpu import ProcessCpuWaits, clamp_to_runnable, thread_runnable_ns
from infertop.collect.tree import (
    descendants,
    exit_marker,
    gone,
    read_cmdline,
    read_ppid,
    split_processes,
)
from infertop.model.events import CollectorStatus, Frame, TargetExited

_THREAD_RE = re.compile(r"^thread \((0x[0-9a-fA-F]+|\d+)\)(?:: (.*))?$")
_FRAME_RE = re.compile(r"^(.*?) \((.*?)(?::(\d+))?\)$")
_SUMMARY_RE = re.compile(r"Samples: (\d+) Errors: (\d+)")
_BEHIND_RE = re.compile(r"([\d.]+)s behind in sampling")
PR_SET_PDEATHSIG = 1
THREAD_REFRESH_WINDOWS = 5  # a ``py-spy dump`` (~30 ms) every this many windows
#: py-spy ends each window by itself (``--duration``): stopped while it still attaches, as a
#: window cut at its deadline was on a busy vLLM host (its start-up 0-3.4 s there), it exits
#: with an error and nothing sampled. Its start-up may take at most this share of a window's
#: wall time: where it takes more, windows get longer (up to MAX_WINDOW_S) ...
START_SHARE = 0.25
MAX_WINDOW_S = 8
#: ... and a py-spy still running this long past its window's duration is stopped
START_GRACE_S = 15.0
#: after a failed window, the next one waits this long, doubling up to FAILURE_WAIT_MAX_S:
#: a target that lives is sampled again, however often py-spy failed
FAILURE_WAIT_S = 0.5
FAILURE_WAIT_MAX_S = 2.0


#: py-spy's raw files go to ``<temp>/infertop-pyspy-<infertop's pid>-<random>/``
FOLDER_PREFIX = "infertop-pyspy-"
#: a live infertop's folder changes every window (py-spy writes a file a second): one older
#: than this is not in use, whatever its pid says (another pid namespace sharing /tmp)
STALE_FOLDER_S = 60.0


def sampling_folder() -> tempfile.TemporaryDirectory[str]:
    """A folder for this infertop's py-spy windows, its pid in the name, after removing those
    of infertops killed before they could remove theirs (SIGKILL, the OOM killer)."""
    root = tempfile.gettempdir()
    sweep_stale_folders(root)
    return tempfile.TemporaryDirectory(prefix=f"{FOLDER_PREFIX}{os.getpid()}-", dir=root)


def sweep_stale_folders(root: str) -> int:
    """Remove the ``infertop-pyspy-PID-*`` folders in ``root`` that are ours (this user's), whose
    infertop is gone and that nothing has written to for a minute; how many. Never raises."""
    removed = 0
    try:
        names = os.listdir(root)
    except OSError:
        return 0
    now = time.time()
    for name in names:
        pid, _, rest = name[len(FOLDER_PREFIX) :].partition("-")
        if not name.startswith(FOLDER_PREFIX) or not pid.isdigit() or not rest:
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
            if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()
                    or now - st.st_mtime < STALE_FOLDER_S or pid_alive(int(pid))):  # fmt: skip
                continue
            shutil.rmtree(path)
            removed += 1
        except OSError:
            pass
    return removed


#: the processes' CPU waits are read at least this often, however long a window (the triggers
#: judge a firing's CPU from them: a window lengthened to 8 s on a starved host came too late)
CPU_WAIT_EVERY_S = 1.0


@dataclass(frozen=True, slots=True)
class RawSampleWindow:
    """A window before interning: stacks as frame tuples (root first)."""

    t_start: float
    t_end: float
    rate_hz: float
    ticks: int
    counts: tuple[tuple[int, str, tuple[Frame, ...], int], ...]  # (tid, thread name, stack, n)
    errors: int = 0
    lag_s: float = 0.0
    threads: int = 0  # Python threads alive (from the latest ``py-spy dump``), 0 if unknown
    #: with ``--children``: (thread id, pid) of the threads in ``counts``, and the processes
    #: sampled, (pid, parent pid or 0, cmdline); empty when only the target is followed
    thread_pids: tuple[tuple[int, int], ...] = ()
    processes: tuple[tuple[int, int, str], ...] = ()
    idle: bool = False  # a wall window (py-spy --idle)


def parse_frame(text: str) -> Frame:
    m = _FRAME_RE.match(text)
    if m is None:
        return Frame(text, "", 0)
    return Frame(m.group(1), m.group(2), int(m.group(3) or 0))


def parse_raw(text: str) -> tuple[list[tuple[int, str, tuple[Frame, ...], int]], int]:
    """Parse py-spy ``--format raw --threads`` output. Returns (rows, unparsable line count)."""
    rows: list[tuple[int, str, tuple[Frame, ...], int]] = []
    bad = 0
    frame_cache: dict[str, Frame] = {}
    for line in text.splitlines():
        line = line.rstrip()
        if not line:
            continue
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not (count_text.isascii() and count_text.isdigit()):
            bad += 1
            continue
        parts = stack_text.split(";")
        tid, name = 0, ""
        m = _THREAD_RE.match(parts[0])
        if m is not None:
            text = m.group(1)  # decimal (a leading 0 is not octal) or 0x hex
            tid = int(text, 16) if text.startswith("0x") else int(text)
            name = m.group(2) or ""
            parts = parts[1:]
        frames = []
        for p in parts:
            f = frame_cache.get(p)
            if f is None:
                f = frame_cache[p] = parse_frame(p)
            frames.append(f)
        rows.append((tid, name, tuple(frames), int(count_text)))
    return rows, bad


def _detach_from_terminal_and_die_with_parent() -> None:
    """In the py-spy child, before exec.

    Its own process group keeps a Ctrl-C typed at infertop from reaching it, while it stays in
    infertop's session: a new session would put it in its own scheduler autogroup, and on a
    saturated CPU that delays its wake-ups in step with the target's work and biases the
    samples (measured: a pure-Python stage at half its true share; docs/performance.md).
    PR_SET_PDEATHSIG sends it SIGINT (a clean stop that detaches) if infertop dies.
    """
    os.setpgid(0, 0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGINT)
    except (OSError, AttributeError):
        pass


def _realtime_child() -> None:
    """As ``_detach_from_terminal_and_die_with_parent``, at real-time priority where the kernel
    allows it (collect/priority.py)."""
    _detach_from_terminal_and_die_with_parent()
    make_realtime()


def _resume_if_stopped(pid: int) -> None:
    """A py-spy killed mid-sample may leave the target stopped: never leave it so."""
    procfs.resume_if_stopped(pid)


class PySpyCollector:
    """Runs py-spy in back-to-back windows on a background thread."""

    name = "py-spy"

    def __init__(
        self,
        pid: int,
        rate_hz: float = 100.0,
        window_s: float = 1.0,
        children: bool = False,
        tag: bool = False,
        cpu_every: int = 2,
        realtime: bool = False,
    ) -> None:
        self.pid = pid
        #: every ``cpu_every``-th window is a CPU window, the others wall windows (0: all wall,
        #: 1: all CPU, as before wall views existed)
        self.cpu_every = cpu_every
        self.children = children  # also sample the target's descendants (py-spy --subprocesses)
        #: one of several targets: its threads and the process itself are named in every window
        #: (with ``children`` py-spy's process frames do that anyway)
        self.tag = tag
        self._procs: dict[int, tuple[int, str]] = {}  # descendants seen: pid -> (ppid, cmdline)
        self._ended: set[int] = set()
        self._sampled: set[int] = set()  # the processes py-spy has read (Python ones)
        self.rate_hz = rate_hz
        self.window_s = window_s
        self._events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._tmpdir = sampling_folder()
        self._pyspy = find_pyspy()
        self._threads = 0
        self._names: dict[int, str] = {}
        #: with ``realtime``: py-spy real-time while its ticks come late
        self.priority = SamplerPriority(rate_hz, realtime)
        self.window_d = max(1, math.ceil(window_s))  # whole seconds: py-spy's --duration
        self.start_s = 0.0  # py-spy's start-up, smoothed over windows (the windows' wall - d)
        #: the processes' CPU waits, read as each window starts and ends (``CpuWait`` events)
        self._cpu_waits = ProcessCpuWaits()

    # -- Collector protocol -------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return  # one sampling loop per collector, however often start is called
        self._thread = threading.Thread(target=self._run, name="infertop-pyspy", daemon=True)
        self._thread.start()

    def poll(self) -> list[object]:
        return drain(self._events)

    def stop(self) -> None:
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGINT)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
            self._resume_all()
        self._tmpdir.cleanup()

    def _resume_all(self) -> None:
        _resume_if_stopped(self.pid)
        for pid in self._live_children():
            if pid in self._sampled:  # only what py-spy may have stopped
                _resume_if_stopped(pid)

    def _live_children(self) -> list[int]:
        """Descendants sampled so far and not known to have exited (never a reused pid)."""
        return [p for p in list(self._procs) if p != self.pid and p not in self._ended]

    # -- the sampling loop ----------------------------------------------------------------------
    def _status(self, state: str, message: str) -> None:
        self._events.put(CollectorStatus(time.time(), self.name, state, message))

    def _run(self) -> None:
        self._status("running", f"{self.rate_hz:g} Hz, all threads" + (
            f", pid {self.pid} and its child processes"
            if self.children else ""))  # fmt: skip
        out_path = os.path.join(self._tmpdir.name, "window.txt")
        failures = 0
        n_window = 0
        counted: list[int] = []
        while not self._stop.is_set():
            # the Python threads alive: where wall windows come (py-spy --idle sees every
            # thread at every tick), from the latest one; else from a ``py-spy dump`` every
            # THREAD_REFRESH_WINDOWS windows and, with --children, as soon as the processes
            # followed change (a dump of each: on a busy vLLM host each took as long as
            # py-spy's start-up there, 3 s for four processes, between two windows)
            if self.cpu_every == 1 and (
                n_window % THREAD_REFRESH_WINDOWS == 0 or counted != self._live_children()
            ):
                counted = self._live_children()
                self._threads = self._count_threads() or self._threads
            n_window += 1
            # the first window is a CPU window: wall windows use its threads' active rates
            wall = not (self.cpu_every and (n_window - 1) % self.cpu_every == 0)
            ok, text = self._one_window(out_path, wall)
            if self._stop.is_set() and not ok:
                break
            if not ok:
                if not pid_alive(self.pid):
                    self._events.put(TargetExited(time.time()))
                    self._status("stopped", "target exited")
                    return
                failures += 1
                err = classify_pyspy_failure(self.pid, text)
                wait = min(FAILURE_WAIT_MAX_S, FAILURE_WAIT_S * 2 ** (failures - 1))
                # a lasting failure (no permission) ends sampling; any other is tried again
                fatal = failures >= 3 and _lasting(str(err))
                self._status(
                    "failed" if fatal else "running",
                    f"py-spy: {err}" + ("" if fatal else " (a window failed: trying again)"),
                )  # fmt: skip
                if fatal:
                    return
                self._stop.wait(wait)
            else:
                failures = 0
                if self.children:
                    self._watch_tree()
        self._status("stopped", "detached")

    def _watch_tree(self) -> None:
        """Every descendant is listed, Python or not (py-spy samples only the Python ones, a
        non-Python child is listed for its GPU memory); a child that died gets one marker
        saying so, and the others carry on."""
        for pid in descendants(self.pid):
            if pid not in self._procs:
                self._procs[pid] = (read_ppid(pid) or 0, read_cmdline(pid))
        for pid in gone(self._live_children()):
            self._ended.add(pid)
            self._events.put(exit_marker(time.time(), pid, self._procs[pid][1]))

    def _note_start(self, start_s: float) -> None:
        """One window's py-spy start-up: windows lengthen where it takes more than START_SHARE
        of their wall time (a busy host, a large process tree: less of it sampled, but sampled),
        and come back as it shortens; each change is said."""
        self.start_s = start_s if not self.start_s else 0.5 * (self.start_s + start_s)
        base = max(1, math.ceil(self.window_s))
        want = math.ceil(self.start_s * (1.0 - START_SHARE) / START_SHARE - 1e-9)
        d = min(MAX_WINDOW_S, max(base, want))
        # longer at once; shorter only by two seconds or more (or back to the base): no
        # back and forth with each window's start-up
        if d == self.window_d or (base < d < self.window_d and self.window_d - d < 2):
            return
        self.window_d = d
        if d > base:
            self._status("running", f"py-spy takes {self.start_s:.1f} s to start on this host: "
                         f"sampling in {d} s windows (the live view updates every {d} s)")  # fmt: skip
        else:
            self._status("running", f"sampling in {d} s windows again")

    def _count_threads(self) -> int:
        """Python threads alive, idle ones included (``py-spy record`` omits those); with
        ``--children``, over every live process followed."""
        if not self.children:
            return self._count_threads_of(self.pid)
        pids = [self.pid] + [p for p in self._live_children() if p in self._sampled]
        return sum(self._count_threads_of(p) for p in pids)

    def _count_threads_of(self, pid: int) -> int:
        try:
            proc = subprocess.run(
                [self._pyspy, "dump", "--json", "--pid", str(pid)],
                capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            threads = json.loads(proc.stdout) if proc.returncode == 0 else []
        except (OSError, subprocess.TimeoutExpired, ValueError):
            return 0
        for th in threads if isinstance(threads, list) else []:
            if isinstance(th, dict) and isinstance(th.get("os_thread_id"), int):
                self._names[th["os_thread_id"]] = str(th.get("thread_name") or "")
        return len(threads) if isinstance(threads, list) else 0

    def _one_window(self, out_path: str, wall: bool = False) -> tuple[bool, str]:
        try:
            os.unlink(out_path)
        except FileNotFoundError:
            pass
        d = self.window_d
        cmd = [
            self._pyspy, "record", "--pid", str(self.pid), "--rate", f"{self.rate_hz:g}",
            "--format", "raw", "--threads", "--full-filenames", "-o", out_path,
            # the window's length: py-spy counts it from its first sample, after attaching
            "--duration", str(d),
        ] + (["--subprocesses"] if self.children else []) + (
            ["--idle", "--nonblocking"] if wall else [])  # fmt: skip
        pids = [self.pid, *self._live_children()]
        runnable_before = {} if wall else thread_runnable_ns(pids)
        t_start = time.time()
        self._put_cpu_waits(pids, t_start)
        try:
            self._proc = proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                preexec_fn=(_realtime_child if self.priority.next_window()
                            else _detach_from_terminal_and_die_with_parent),
            )
        except OSError as exc:
            return False, f"Error: cannot start py-spy: {exc}"
        self.priority.started(proc.pid)
        deadline = t_start + d + START_GRACE_S
        judged = 0.0
        read_cpu = t_start
        while proc.poll() is None and not self._stop.is_set() and time.time() < deadline:
            self._stop.wait(0.05)
            now = time.time()
            if now - read_cpu >= CPU_WAIT_EVERY_S:  # a long window's waits come on time too
                self._put_cpu_waits(pids, now)
                read_cpu = now
            elapsed = now - t_start
            self.priority.watch(proc.pid, elapsed)
            if elapsed - judged >= 0.25 and proc.poll() is None:
                judged = elapsed  # its lateness so far (it ends by itself: judged while alive)
                self.priority.ended(proc.pid, elapsed)
        stopped = proc.poll() is None
        if stopped:
            proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            self._resume_all()
        t_end = time.time()
        if proc.returncode != 0 or not os.path.exists(out_path):
            return False, out.strip() or (
                f"Error: py-spy exited with code {proc.returncode} and said nothing"
                + (" (stopped while it was starting)" if stopped else ""))
        # py-spy sampled for d seconds up to its exit (less where it was stopped): before that
        # it was starting
        took = t_end - t_start
        if stopped:
            sampled = max(min(d, took - self.start_s), 0.1 * took)
        else:
            sampled = min(float(d), took)
            self._note_start(took - sampled)
        t_start = t_end - sampled
        with open(out_path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        thread_pids: dict[int, int] = {}
        if self.children:
            text, thread_pids, procs = split_processes(text)
            self._sampled.update(procs)
            for pid, (ppid, cmdline) in procs.items():
                if pid not in self._procs or (ppid and not self._procs[pid][0]):
                    self._procs[pid] = (ppid, cmdline)
        rows, bad = parse_raw(text)
        if wall and rows:
            self._threads = len({tid for tid, _name, _st, _n in rows})
        if not wall:  # a sleeping thread py-spy saw as active is not (collect/thread_cpu.py)
            after = thread_runnable_ns([self.pid, *self._live_children()])
            rows = clamp_to_runnable(rows, runnable_before, after, self.rate_hz)
        if self.tag and not self.children:
            self._procs.setdefault(self.pid, (0, read_cmdline(self.pid)))
            thread_pids = {tid: self.pid for tid, _name, _st, _n in rows}
        m = _SUMMARY_RE.search(out)
        errors = int(m.group(2)) if m else 0
        lag = max((float(x) for x in _BEHIND_RE.findall(out)), default=0.0)
        ticks = max(1, round((t_end - t_start) * self.rate_hz))
        self._events.put(
            RawSampleWindow(
                t_start,
                t_end,
                self.rate_hz,
                ticks,
                tuple((tid, name or self._names.get(tid, ""), st, n) for tid, name, st, n in rows),
                errors + bad,
                lag,
                self._threads,
                tuple(thread_pids.items()),
                tuple((p, pp, c) for p, (pp, c) in self._procs.items())
                if self.children or self.tag
                else (),
                wall,
            )
        )
        self._put_cpu_waits([self.pid, *self._live_children()], t_end)
        return True, out

    def _put_cpu_waits(self, pids: list[int], t: float) -> None:
        for ev in self._cpu_waits.read(pids, t):
            self._events.put(ev)


def _lasting(err: str) -> bool:
    """A py-spy failure that trying again will not cure: no permission, not Python."""
    low = err.lower()
    return any(w in low for w in ("permission", "not a python", "cap_sys_ptrace", "not found"))
