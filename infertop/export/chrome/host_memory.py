"""Each process's host memory as counters of the Chrome export (recording code 20): RSS by kind
and swap, page faults per second, and its memory cgroup's usage against its limit and its OOM
kills, in the process's own track group."""

from __future__ import annotations

from collections.abc import Callable

from infertop.export.jsonout import us
from infertop.model.host_memory import HostMemoryReading

MIB = 1 << 20


def _mib(n: int | None) -> float | None:
    return None if n is None else round(n / MIB, 3)


class HostMemoryCounters:
    """Counter events from readings in time order; fault rates between a process's readings."""

    def __init__(self, emit: Callable[[dict], None], ns: Callable[[float], int]) -> None:
        self.emit = emit
        self.ns = ns
        self._last: dict[int, HostMemoryReading] = {}  # pid -> its previous reading

    def _counter(self, pid: int, ts: float, name: str, args: dict[str, float | None]) -> None:
        kept = {k: v for k, v in args.items() if v is not None}
        if kept:
            self.emit({"ph": "C", "pid": pid, "tid": 0, "ts": ts, "name": name, "args": kept})

    def reading(self, chrome_pid: int, r: HostMemoryReading) -> None:
        ts = us(max(0, self.ns(r.t)))
        self._counter(chrome_pid, ts, "host memory (MiB)", {
            "rss anon": _mib(r.rss_anon), "rss file": _mib(r.rss_file),
            "rss shmem": _mib(r.rss_shmem), "swap": _mib(r.swap),
        })  # fmt: skip
        before = self._last.get(r.pid)
        self._last[r.pid] = r
        if before is not None and r.t > before.t:
            dt = r.t - before.t
            rates: dict[str, float | None] = {}
            for name, a, b in (("major", before.major_faults, r.major_faults),
                               ("minor", before.minor_faults, r.minor_faults)):  # fmt: skip
                rates[name] = None if a is None or b is None else round(max(0, b - a) / dt, 3)
            self._counter(chrome_pid, ts, "page faults (/s)", rates)
        cg = r.cgroup
        if cg is not None:
            self._counter(chrome_pid, ts, f"cgroup v{cg.version} {cg.path} (MiB)",
                          {"usage": _mib(cg.usage), "limit": _mib(cg.limit)})  # fmt: skip
            if cg.oom_kills:
                self._counter(chrome_pid, ts, "cgroup OOM kills", {"oom kills": cg.oom_kills})
