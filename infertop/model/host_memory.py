"""Host memory of one process, read from ``/proc`` and its memory cgroup outside the target.

One immutable reading per process per tick (``collect/host_memory.py``). Sizes are bytes; the
fault counts are the kernel's, since the process started (rates are the analysis's). A field
the kernel did not give is None.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CgroupMemory:
    """The memory cgroup a process is charged to: the one of it and its ancestors whose limit
    is closest to being reached (the leaf when none has a limit)."""

    version: int  # 1 or 2
    path: str  # the cgroup's path in its hierarchy, as /proc/PID/cgroup names it
    limit: int | None  # bytes; None: no limit (v2 ``max``, v1's page-counter maximum)
    usage: int | None  # bytes (v2 memory.current, v1 memory.usage_in_bytes)
    oom_kills: int | None  # processes the kernel's OOM killer killed in it, since it was made
    #: pressure stall information (v2 memory.pressure, Linux 4.20+): µs in which some / all of
    #: its tasks stalled on memory, since it was made; None without PSI
    pressure_some_us: int | None = None
    pressure_full_us: int | None = None


@dataclass(frozen=True, slots=True)
class HostMemoryReading:
    t: float
    pid: int  # the process, as infertop sees it (its pid namespace)
    rss: int | None  # VmRSS = rss_anon + rss_file + rss_shmem
    rss_anon: int | None
    rss_file: int | None
    rss_shmem: int | None
    swap: int | None  # VmSwap
    minor_faults: int | None  # since the process started
    major_faults: int | None
    cgroup: CgroupMemory | None = None  # None: not in a memory cgroup infertop can read


@dataclass(frozen=True, slots=True)
class ObjectCensus:
    """What a process's heap held at ``t``, counted by its agent (docs/agent-protocol.md,
    ``census``): the count of each type among the objects the garbage collector tracks (the
    most numerous), and the longest containers with their estimated bytes and the module
    global that holds each, if one does. Compared over time it says what grows."""

    t: float
    pid: int  # 0: the target (an agent's own events), else the process (--children)
    objects: int  # objects the garbage collector tracks
    cost_s: float  # the census's time on the agent's thread
    types: tuple[tuple[str, int], ...]  # (type, count), most numerous first
    #: (id, kind, length, estimated bytes or None, holder's name or None), longest first
    containers: tuple[tuple[int, str, int, int | None, str | None], ...]
