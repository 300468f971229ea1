"""Recording event 20 (format 1.8): one reading of a process's host memory, taken outside it
from ``/proc`` and its memory cgroup (docs/recording-format.md; ``collect/host_memory.py``).

    [20, t, pid, rss, rss_anon, rss_file, rss_shmem, swap, minor_faults, major_faults, cgroup]
    cgroup = nil | [version, path, limit, usage, oom_kills, pressure_some_us, pressure_full_us]

Sizes are bytes, the fault counts and the pressure totals the kernel's since the process (the
cgroup) began; every field after ``pid`` may be nil (the kernel did not say; ``limit`` nil: no
limit). A reader ignores trailing fields it does not know, in the event and in ``cgroup``.

Event 23 (format 1.11): the agent's object census of a process's heap (``ObjectCensus``)::

    [23, t, pid, objects, cost_s, [[type, count], ...], [[id, kind, length, bytes, name], ...]]

``bytes`` and ``name`` may be nil (not estimated; no module global holds the container).
"""

from __future__ import annotations

from typing import Any

from infertop.model.fields import as_str
from infertop.model.host_memory import CgroupMemory, HostMemoryReading, ObjectCensus
from infertop.model.numbers import real, whole

HOST_MEMORY = 20
CENSUS = 23


def _opt(x: Any) -> int | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(f"expected an integer, got {type(x).__name__}")
    return whole(x)


def encode_host_memory(r: HostMemoryReading) -> list[Any]:
    cg = r.cgroup
    return [
        HOST_MEMORY, r.t, r.pid, r.rss, r.rss_anon, r.rss_file, r.rss_shmem, r.swap,
        r.minor_faults, r.major_faults,
        None if cg is None else [cg.version, cg.path, cg.limit, cg.usage, cg.oom_kills,
                                 cg.pressure_some_us, cg.pressure_full_us],
    ]  # fmt: skip


def decode_host_memory(f: list[Any]) -> HostMemoryReading:
    """A reading from its fields (after the code); a malformed one raises ValueError."""
    try:
        c = f[9]
        cgroup = None
        if c is not None:
            if not isinstance(c, list) or len(c) < 7:
                raise ValueError("cgroup is not a list of 7")
            limit, usage, kills, some, full = (_opt(x) for x in c[2:7])
            cgroup = CgroupMemory(whole(c[0]), as_str(c[1]), limit, usage, kills, some, full)
        rss, anon, file, shmem, swap, minor, major = (_opt(x) for x in f[2:9])
        return HostMemoryReading(
            real(f[0]), whole(f[1]), rss, anon, file, shmem, swap, minor, major, cgroup
        )
    except (TypeError, IndexError) as exc:
        raise ValueError(f"malformed host memory reading: {exc}") from None


def encode_census(c: ObjectCensus) -> list[Any]:
    return [CENSUS, c.t, c.pid, c.objects, c.cost_s, [list(x) for x in c.types],
            [list(x) for x in c.containers]]  # fmt: skip


def decode_census(f: list[Any]) -> ObjectCensus:
    """A census from its fields (after the code); a malformed one raises ValueError."""
    try:
        types = tuple((as_str(n), whole(k)) for n, k, *_ in f[4])
        containers = tuple(
            (whole(key), as_str(kind), whole(n), _opt(size), None if name is None else as_str(name))
            for key, kind, n, size, name, *_ in f[5]
        )
        return ObjectCensus(real(f[0]), whole(f[1]), whole(f[2]), real(f[3]), types, containers)
    except (TypeError, IndexError) as exc:
        raise ValueError(f"malformed object census: {exc}") from None
