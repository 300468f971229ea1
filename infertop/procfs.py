"""Reading ``/proc``: one parser per file, for the whole project (see proc(5)).

The bottom layer: this module imports nothing of infertop, so anything may use it (except the
agent's payload and ``agent/protocol.py``, which are sent into targets as source text and stay
self-contained).

Errors are the caller's to handle: a process that is gone raises ``OSError``
(``FileNotFoundError`` or ``ProcessLookupError``), a file that does not parse raises
``ValueError``. The few helpers that answer ``None`` instead say so.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class Stat:
    """``/proc/PID/stat`` (or ``/proc/PID/task/TID/stat``)."""

    pid: int
    comm: str
    #: every field after ``comm``: ``fields[0]`` is field 3 of proc(5) (state)
    fields: tuple[str, ...]

    def field(self, number: int) -> str:
        """Field ``number`` as proc(5) counts them (1: pid, 2: comm, 3: state, ...)."""
        if number == 1:
            return str(self.pid)
        if number == 2:
            return self.comm
        try:
            return self.fields[number - 3]
        except IndexError:
            raise ValueError(f"stat has no field {number}") from None

    @property
    def state(self) -> str:
        """One letter: R running, S sleeping, D disk sleep, T stopped, t tracing stop, Z zombie,
        X dead, ..."""
        return self.fields[0]

    @property
    def ppid(self) -> int:
        return int(self.field(4))

    @property
    def start_time(self) -> int:
        """When the process started, in clock ticks after boot (``SC_CLK_TCK``)."""
        return int(self.field(22))


def parse_stat(text: str) -> Stat:
    """Parse the text of a stat file. ``comm`` may hold spaces and parentheses (a process may
    name itself ``a) b``): it is everything between the first ``(`` and the LAST ``)``."""
    head, close, tail = text.rpartition(")")
    pid_text, open_, comm = head.partition(" (")
    fields = tuple(tail.split())
    if not close or not open_ or not fields:
        raise ValueError(f"not a stat line: {text[:80]!r}")
    return Stat(int(pid_text), comm, fields)


def pids() -> list[int]:
    """Every process of this pid namespace (``/proc``'s numeric entries), in the kernel's order."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _path(pid: int, tid: int | None, name: str) -> str:
    if tid is None:
        return f"/proc/{pid}/{name}"
    return f"/proc/{pid}/task/{tid}/{name}"


def read_stat(pid: int, tid: int | None = None) -> Stat:
    """The stat of process ``pid`` (of its thread ``tid`` when given)."""
    with open(_path(pid, tid, "stat"), encoding="utf-8", errors="replace") as fh:
        return parse_stat(fh.read())


def state(pid: int) -> str | None:
    """The process's state letter (see ``Stat.state``); None when it cannot be read (gone)."""
    try:
        return read_stat(pid).state
    except (OSError, ValueError):
        return None


def ppid(pid: int) -> int | None:
    """The parent pid; None when the process is gone."""
    try:
        return read_stat(pid).ppid
    except (OSError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks after boot; None when it is gone. With the pid,
    it names a process for good (a pid is reused, a (pid, start time) pair is not)."""
    try:
        return read_stat(pid).start_time
    except (OSError, ValueError):
        return None


def resume_if_stopped(pid: int) -> None:
    """SIGCONT ``pid`` if it is stopped (``T`` or ``t``): a tracer killed mid-stop (py-spy, gdb)
    may leave a target so; never raises."""
    if state(pid) in ("T", "t"):
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass


def parse_status(text: str) -> dict[str, list[str]]:
    """The text of a status file as {key: the value's words}."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        out[key] = value.split()
    return out


def status(pid: int, proc: str = "/proc") -> dict[str, list[str]]:
    """``/proc/PID/status`` as {key: the value's words}, e.g. ``{"Uid": ["0", "0", "0", "0"]}``.
    ``proc``: where ``/proc`` is (tests give a directory of recorded files)."""
    with open(f"{proc}/{pid}/status", encoding="utf-8", errors="replace") as fh:
        return parse_status(fh.read())


def status_bytes(st: dict[str, list[str]], key: str) -> int | None:
    """A status size (``VmRSS:  2160 kB``) in bytes; None when the kernel does not give it
    (``RssAnon`` and the like came in Linux 4.5; a kernel thread has no ``VmRSS``)."""
    words = st.get(key)
    if not words:
        return None
    try:
        n = int(words[0])
    except ValueError:
        return None
    unit = words[1].lower() if len(words) > 1 else "b"
    return n * {"kb": 1024, "mb": 1024**2, "gb": 1024**3}.get(unit, 1)


@dataclass(frozen=True)
class MemoryStatus:
    """A process's memory as ``/proc/PID/status`` and ``stat`` tell it, in bytes; None where
    the kernel does not say. ``rss`` is ``VmRSS`` = anonymous + file + shared."""

    rss: int | None
    rss_anon: int | None
    rss_file: int | None
    rss_shmem: int | None
    swap: int | None
    minor_faults: int  # since the process started (stat fields 10 and 12)
    major_faults: int


def memory_status(pid: int, proc: str = "/proc") -> MemoryStatus:
    """Process ``pid``'s memory (``OSError`` when it is gone)."""
    st = status(pid, proc)
    with open(f"{proc}/{pid}/stat", encoding="utf-8", errors="replace") as fh:
        minor, major = faults(parse_stat(fh.read()))
    b = status_bytes
    return MemoryStatus(b(st, "VmRSS"), b(st, "RssAnon"), b(st, "RssFile"), b(st, "RssShmem"),
                        b(st, "VmSwap"), minor, major)  # fmt: skip


def faults(st: Stat) -> tuple[int, int]:
    """(minor, major) page faults of the process since it started (not its children's)."""
    return int(st.field(10)), int(st.field(12))


@dataclass(frozen=True)
class CgroupLine:
    """One line of ``/proc/PID/cgroup``: ``hierarchy:controllers:path``. Version 2 is the line
    ``0::PATH``; a version-1 hierarchy names its controllers (``4:memory:/docker/abc``). The
    path is relative to the reader's cgroup namespace root."""

    hierarchy: int
    controllers: tuple[str, ...]
    path: str


def parse_cgroup(text: str) -> list[CgroupLine]:
    out = []
    for line in text.splitlines():
        hier, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        if not hier.strip().isdigit() or not path:
            continue
        out.append(CgroupLine(int(hier), tuple(n for n in names.split(",") if n), path))
    return out


def cgroups(pid: int | str, proc: str = "/proc") -> list[CgroupLine]:
    """The cgroups of process ``pid`` (``"self"``: this one)."""
    with open(f"{proc}/{pid}/cgroup", encoding="utf-8", errors="replace") as fh:
        return parse_cgroup(fh.read())


@dataclass(frozen=True)
class Mount:
    """One line of ``/proc/PID/mountinfo`` (proc(5)): the mount's root within its filesystem,
    where it is mounted, the filesystem type and its super options."""

    root: str
    point: str
    fstype: str
    options: tuple[str, ...]


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (``\\040``)."""
    if "\\" not in path:
        return path
    out, i = [], 0
    while i < len(path):
        if path[i] == "\\" and path[i + 1 : i + 4].isdigit():
            out.append(chr(int(path[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    out = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(after) < 3:
            continue
        out.append(
            Mount(_unescape(fields[3]), _unescape(fields[4]), after[0], tuple(after[2].split(",")))
        )
    return out


def mountinfo(pid: int | str = "self", proc: str = "/proc") -> list[Mount]:
    """The mounts process ``pid`` sees (default: this one's)."""
    with open(f"{proc}/{pid}/mountinfo", encoding="utf-8", errors="replace") as fh:
        return parse_mountinfo(fh.read())


def ns_pids(pid: int) -> list[int]:
    """The process's pid in each pid namespace it is in, outermost first (``NSpid``); empty
    when the kernel does not say."""
    return [int(x) for x in status(pid).get("NSpid", ())]


def cmdline(pid: int) -> list[str]:
    """The process's arguments (empty for a kernel thread or a zombie); trailing empty
    arguments are dropped."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        raw = fh.read().rstrip(b"\0")
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0")] if raw else []


def threads(pid: int) -> list[int]:
    """The thread ids of process ``pid`` (``/proc/PID/task``), in the kernel's order."""
    return [int(name) for name in os.listdir(f"/proc/{pid}/task") if name.isdigit()]


def thread_children(pid: int, tid: int) -> list[int]:
    """The child processes thread ``tid`` of ``pid`` started (``/proc/PID/task/TID/children``;
    ``FileNotFoundError`` where the kernel lacks those files)."""
    with open(_path(pid, tid, "children")) as fh:
        return [int(x) for x in fh.read().split()]


def schedstat(pid: int, tid: int | None = None) -> tuple[int, int, int]:
    """(ns on CPU, ns waiting on a run queue, time slices) of ``pid`` (its thread ``tid``)."""
    with open(_path(pid, tid, "schedstat")) as fh:
        parts = fh.read().split()
    if len(parts) < 3:
        raise ValueError(f"not a schedstat line: {' '.join(parts)!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


@dataclass
class Mapping:
    """One file-backed line of ``/proc/PID/maps``."""

    start: int
    end: int
    offset: int
    path: str


def maps(pid: int) -> list[Mapping]:
    """The file-backed mappings of ``pid`` (anonymous ones, ``[heap]`` and the like left out)."""
    out = []
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) < 6:
                continue
            lo, hi = parts[0].split("-")
            path = parts[5].strip()
            if not path.startswith("/"):
                continue
            out.append(Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), path))
    return out


def cpu_flags() -> set[str]:
    """The CPU's feature flags (the first ``flags`` line of ``/proc/cpuinfo``); empty when
    there is none (not x86) or it cannot be read."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split())
    except OSError:
        pass
    return set()
