"""Host memory of every attached process, read outside the target (no code runs in it).

Once a second (``HostMemoryCollector``) each process's RSS (anonymous, file, shared), swap and
page-fault counts come from ``/proc/PID/status`` and ``stat``, and its memory cgroup's limit,
usage, OOM kills and pressure from the cgroup files, found through ``/proc/PID/cgroup`` and
this process's own mount table: version 2 (``memory.max``, ``memory.current``,
``memory.events``, ``memory.pressure``) or version 1 (``memory.limit_in_bytes``,
``memory.usage_in_bytes``, ``memory.oom_control``). Of a cgroup and its ancestors, the one
whose limit is closest to being reached is the one reported (a container's limit is often set
on a parent of the process's own cgroup).

A read costs a few small file reads per process: nothing in the target, about 0.1 ms here.
"""

from __future__ import annotations

import os
import posixpath
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from infertop import procfs
from infertop.collect.base import drain
from infertop.collect.tree import descendants
from infertop.model.events import CollectorStatus
from infertop.model.host_memory import CgroupMemory, HostMemoryReading

NAME = "host-memory"
INTERVAL_S = 1.0
#: a v1 limit at or above this is no limit (the kernel's "unlimited" is PAGE_COUNTER_MAX pages)
UNLIMITED = 1 << 60


@dataclass(frozen=True)
class CgroupMounts:
    """Where the memory cgroup hierarchies are mounted here: (mount root, mount point)."""

    v2: tuple[str, str] | None
    v1_memory: tuple[str, str] | None

    @classmethod
    def of(cls, mounts: Sequence[procfs.Mount]) -> CgroupMounts:
        v2 = next(((m.root, m.point) for m in mounts if m.fstype == "cgroup2"), None)
        v1 = next(
            ((m.root, m.point) for m in mounts if m.fstype == "cgroup" and "memory" in m.options),
            None,
        )
        return cls(v2, v1)


def _under(mount: tuple[str, str], path: str) -> str:
    """The directory of cgroup ``path`` under a mount whose root is ``mount[0]``."""
    root, point = mount
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root.rstrip("/")) :] or "/"
    return posixpath.normpath(point + "/" + path.lstrip("/"))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _keyed(text: str | None, key: str) -> int | None:
    """``key N`` from a flat keyed file (memory.events, memory.oom_control)."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return _int(value)
    return None


def parse_pressure(text: str | None) -> tuple[int | None, int | None]:
    """(some, full) ``total=`` µs of a PSI file (``some avg10=0.00 ... total=123``)."""
    totals: dict[str, int | None] = {"some": None, "full": None}
    for line in (text or "").splitlines():
        kind, *pairs = line.split()
        for pair in pairs:
            if pair.startswith("total=") and kind in totals:
                totals[kind] = _int(pair[6:])
    return totals["some"], totals["full"]


def _limit(version: int, d: str) -> tuple[bool, int | None]:
    """(the file is there, the limit or None for none)."""
    text = _read(f"{d}/memory.max" if version == 2 else f"{d}/memory.limit_in_bytes")
    if text is None:
        return False, None
    if version == 2 and text.strip() == "max":
        return True, None
    n = _int(text)
    return True, None if n is None or n >= UNLIMITED else n


def _cgroup_at(version: int, d: str, path: str, limit: int | None) -> CgroupMemory:
    if version == 2:
        some, full = parse_pressure(_read(f"{d}/memory.pressure"))
        return CgroupMemory(2, path, limit, _int(_read(f"{d}/memory.current")),
                            _keyed(_read(f"{d}/memory.events"), "oom_kill"), some, full)  # fmt: skip
    return CgroupMemory(1, path, limit, _int(_read(f"{d}/memory.usage_in_bytes")),
                        _keyed(_read(f"{d}/memory.oom_control"), "oom_kill"))  # fmt: skip


def read_cgroup(lines: Sequence[procfs.CgroupLine], mounts: CgroupMounts) -> CgroupMemory | None:
    """The memory cgroup of a process with these ``/proc/PID/cgroup`` lines: version 1 where
    its memory controller is mounted (a hybrid host keeps memory on v1), else version 2 where
    the memory controller is on; None where neither can be read."""
    found: list[tuple[int, tuple[str, str], str]] = []
    for line in lines:
        if "memory" in line.controllers and mounts.v1_memory:
            found.append((1, mounts.v1_memory, line.path))
        elif line.hierarchy == 0 and not line.controllers and mounts.v2:
            found.append((2, mounts.v2, line.path))
    for version, mount, path in sorted(found):
        leaf = _under(mount, path)
        usage_file = "memory.current" if version == 2 else "memory.usage_in_bytes"
        if not os.path.exists(f"{leaf}/{usage_file}") and version == 2 and path != "/":
            continue  # v2 without the memory controller on this cgroup
        best: tuple[int, str, str, int | None] | None = None  # (headroom, dir, path, limit)
        d, p = leaf, path
        while True:
            there, limit = _limit(version, d)
            if there and limit is not None:
                usage = _int(_read(f"{d}/{usage_file}")) or 0
                if best is None or limit - usage < best[0]:
                    best = (limit - usage, d, p, limit)
            if d == posixpath.normpath(mount[1]) or p in ("/", ""):
                break
            d, p = posixpath.dirname(d), posixpath.dirname(p)
        if best is not None:
            return _cgroup_at(version, best[1], best[2], best[3])
        if os.path.exists(f"{leaf}/{usage_file}"):
            return _cgroup_at(version, leaf, path, None)
    return None


class HostMemoryReader:
    """One reading of a process's memory at a time. ``proc``: where ``/proc`` is; the mounts
    are this process's own (``/proc/self/mountinfo``) unless given (tests: recorded files)."""

    def __init__(self, proc: str = "/proc", mounts: CgroupMounts | None = None) -> None:
        self.proc = proc
        if mounts is None:
            try:
                mounts = CgroupMounts.of(procfs.mountinfo("self", proc))
            except (OSError, ValueError):
                mounts = CgroupMounts(None, None)
        self.mounts = mounts

    def describe(self) -> str:
        """Which memory cgroup hierarchy is read (a hybrid host keeps memory on v1)."""
        if self.mounts.v1_memory:
            return "cgroup v1"
        return "cgroup v2" if self.mounts.v2 else "no memory cgroup mounted"

    def read(self, pid: int, t: float | None = None) -> HostMemoryReading | None:
        """The process's memory now; None when it is gone or its files do not parse."""
        t = time.time() if t is None else t
        try:
            m = procfs.memory_status(pid, self.proc)
        except (OSError, ValueError):
            return None
        try:
            cgroup = read_cgroup(procfs.cgroups(pid, self.proc), self.mounts)
        except (OSError, ValueError):
            cgroup = None
        return HostMemoryReading(t, pid, m.rss, m.rss_anon, m.rss_file, m.rss_shmem, m.swap,
                                 m.minor_faults, m.major_faults, cgroup)  # fmt: skip


TREE_EVERY = 5  # readings between two looks at a session's processes (5 s at 1 s)


class HostMemoryCollector:
    """Reads every process of the session once per ``interval`` on its own thread (collector
    protocol): the targets and, with ``children``, their descendants."""

    name = NAME

    def __init__(
        self,
        target_pid: int | None,
        interval: float = INTERVAL_S,
        *,
        others: Sequence[int] = (),
        children: bool = False,
        reader: HostMemoryReader | None = None,
    ) -> None:
        self.interval = interval
        self._reader = reader or HostMemoryReader()
        self._roots = [p for p in (target_pid, *others) if p]
        self._children = children
        self._events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def follow(self, pids: list[int]) -> None:
        """The session's processes are ``pids``, a list that changes (``watch --match``)."""
        self._roots = pids

    def status(self) -> CollectorStatus:
        text = f"every {self.interval:g} s · {self._reader.describe()}"
        return CollectorStatus(time.time(), NAME, "running", text)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._events.put(self.status())
        self._thread = threading.Thread(target=self._run, name="infertop-host-memory", daemon=True)
        self._thread.start()

    def _pids(self) -> list[int]:
        pids: list[int] = []
        for root in list(self._roots):
            for pid in [root, *(descendants(root) if self._children else ())]:
                if pid not in pids:
                    pids.append(pid)
        return pids

    def _run(self) -> None:
        n = 0
        pids: list[int] = []
        while not self._stop.is_set():
            if n % TREE_EVERY == 0 or not self._children:
                pids = self._pids()
            n += 1
            t = time.time()
            try:
                for pid in pids:
                    reading = self._reader.read(pid, t)
                    if reading is not None:
                        self._events.put(reading)
            except Exception as exc:  # noqa: BLE001 - a bug here must not end the session
                self._events.put(
                    CollectorStatus(time.time(), NAME, "failed", f"{type(exc).__name__}: {exc}")
                )
                return
            self._stop.wait(self.interval)

    def poll(self) -> list[object]:
        return drain(self._events)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
