"""The report's ``memory`` section (docs/report.md): each process's host memory, read outside it
from ``/proc`` and its memory cgroup (``analysis/host_memory.py``), and its lines in the text
report.

``torch``: what the allocator reported in the model calls the agent profiled with
``profile_memory`` (``analysis/ops.py``, ``TorchMemory``); ``null`` without them.
"""

from __future__ import annotations

from typing import Any

from infertop.analysis.host_memory import Growing, HostMemorySummary, ProcessMemory
from infertop.analysis.ops import TorchMemory

TORCH_OPS = 10  # the ops listed, by bytes allocated


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def growing_dict(g: Growing, pid: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {} if pid is None else {"pid": pid}
    out.update(
        {
            "what": g.what,
            "type": g.type,
            "name": g.name,
            "count": g.count_last,
            "count_first": g.count_first,
            "count_per_s": _r(g.count_per_s, 2),
            "bytes": g.bytes_last,
            "bytes_per_s": _r(g.bytes_per_s, 1),
            "censuses": g.censuses,
        }
    )
    return out


def _process(p: ProcessMemory) -> dict[str, Any]:
    cg = p.cgroup
    return {
        "pid": p.pid,
        "rss_bytes": {"first": p.rss_first, "last": p.rss_last, "max": p.rss_max},
        "rss_split_bytes": {"anon": p.rss_anon, "file": p.rss_file, "shmem": p.rss_shmem},
        "swap_bytes": p.swap_max,
        "major_faults_per_s": _r(p.major_faults_per_s),
        "minor_faults_per_s": _r(p.minor_faults_per_s, 1),
        "growth_bytes_per_s": _r(p.growth_bytes_per_s, 1),
        "growth_r2": _r(p.growth_r2),
        "growth_per_call_bytes": _r(p.growth_per_call_bytes, 1),
        "growth_per_call_of": p.growth_call_kind if p.growth_per_call_bytes is not None else None,
        "growth_s": _r(p.growth_s, 1),
        "limit_bytes": None if cg is None else cg.limit,
        "usage_bytes": None if cg is None else cg.usage,
        "oom_kills": p.oom_kills_during,
        "oom_kills_total": None if cg is None else cg.oom_kills,
        "cgroup": None if cg is None else {"version": cg.version, "path": cg.path},
        "growing": [growing_dict(g) for g in p.growing],
    }


def _per(n: int, calls: int) -> float | None:
    return round(n / calls, 1) if calls else None


def torch_dict(t: TorchMemory | None) -> dict[str, Any] | None:
    """The ``torch`` record: by stage and device, the peak of a forward call, the ops."""
    if t is None:
        return None
    by_stage: dict[str, dict[str, Any]] = {}
    for st in t.stages:
        by_stage.setdefault(st.stage, {})[st.device] = {
            "calls": st.calls,
            "allocs": st.allocs,
            "alloc_bytes": st.alloc_bytes,
            "freed_bytes": st.freed_bytes,
            "alloc_bytes_per_call": _per(st.alloc_bytes, st.calls),
            "peak_per_call_bytes": _per(st.peak_sum, st.calls),
            "peak_max_bytes": st.peak_max if st.calls else None,
        }
    forward = [st for st in t.stages if st.stage == "forward" and st.calls]
    calls = {st.device: st.calls for st in t.stages}
    return {
        "windows": t.windows,
        "by_stage": by_stage,
        "peak_per_call_bytes": max((st.peak_max for st in forward), default=None),
        "ops": [
            {
                "op": o.names[-1],
                "path": list(o.names),
                "stage": o.stage,
                "device": o.device,
                "allocs": o.allocs,
                "alloc_bytes": o.alloc_bytes,
                "alloc_bytes_per_call": _per(
                    o.alloc_bytes,
                    next((st.calls for st in t.stages if (st.stage, st.device) == (o.stage, o.device)), 0),
                ),
            }
            for o in t.ops[:TORCH_OPS]
        ]
        if calls
        else [],
    }


def memory_dict(m: HostMemorySummary | None, torch: TorchMemory | None = None) -> dict[str, Any] | None:
    """None when no process's memory was read (a recording made before format 1.8, an import)
    and no model call was profiled with ``profile_memory``."""
    if m is None:
        if torch is None:
            return None
        return {"processes": [], "growth_bytes_per_s": None, "torch": torch_dict(torch), "growing": []}
    return {
        "processes": [_process(p) for p in m.processes],
        "growth_bytes_per_s": _r(m.growth_bytes_per_s, 1),
        "torch": torch_dict(torch),
        "growing": [
            growing_dict(g, p.pid)
            for p in sorted(m.processes, key=lambda p: -(p.growth_bytes_per_s or 0.0))
            for g in p.growing
        ],
    }


def size(n: float) -> str:
    """Bytes as people read them: ``812.4 MiB``, ``7.50 GiB``."""
    if abs(n) >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    if abs(n) >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 1024:.1f} KiB"


def memory_lines(rep: dict[str, Any]) -> list[str]:
    """The text report's lines: per process its RSS, growth, swap and faults, and the cgroup's
    limit and headroom."""
    m = rep.get("memory")
    if not m or not m.get("processes"):
        return []
    lines = ["host memory (read from /proc and the memory cgroup, outside the target):"]
    for p in m["processes"]:
        rss = p["rss_bytes"]
        line = (
            f"  pid {p['pid']}: rss {size(rss['first'])} → {size(rss['last'])} "
            f"(max {size(rss['max'])})"
        )
        if p.get("growth_bytes_per_s") is not None:
            line += f", growing {size(p['growth_bytes_per_s'])}/s past warm-up"
            if p.get("growth_per_call_bytes") is not None:
                line += f" ({size(p['growth_per_call_bytes'])} per {p['growth_per_call_of']})"
        if p.get("swap_bytes"):
            line += f", swap {size(p['swap_bytes'])}"
        if p.get("major_faults_per_s"):
            line += f", {p['major_faults_per_s']:.1f} major faults/s"
        lines.append(line)
        for g in p.get("growing") or ():
            lines.append(f"    growing: {growing_text(g)}")
        cg = p.get("cgroup")
        if cg is None:
            continue
        where = f"cgroup v{cg['version']} {cg['path']}"
        if p.get("limit_bytes") is not None and p.get("usage_bytes") is not None:
            used = p["usage_bytes"] / p["limit_bytes"] if p["limit_bytes"] else 0.0
            text = (
                f"    {where}: {size(p['usage_bytes'])} of its {size(p['limit_bytes'])} limit "
                f"({100 * used:.0f}%), {size(p['limit_bytes'] - p['usage_bytes'])} left"
            )
        else:
            usage = p.get("usage_bytes")
            text = f"    {where}: no limit" + (f", {size(usage)} used" if usage is not None else "")
        if p.get("oom_kills"):
            text += f"; {p['oom_kills']} OOM kills during the recording"
        elif p.get("oom_kills_total"):
            text += f"; {p['oom_kills_total']} OOM kills before it"
        lines.append(text)
    return lines + [""]


def growing_text(g: dict[str, Any]) -> str:
    """``__main__.kept (list): 900 → 1,800 items, +20.0/s, ~488.3 KiB/s`` or
    ``__main__.Request: 300 → 900 objects, +15.0/s``."""
    if g["what"] == "container":
        head = f"{g['name'] or 'a ' + g['type'] + ' no module global holds'} ({g['type']})"
        unit = "items"
    else:
        head, unit = g["type"], "objects"
    text = f"{head}: {g['count_first']:,} → {g['count']:,} {unit}, +{g['count_per_s']:.1f}/s"
    if g.get("bytes_per_s") is not None and g["bytes_per_s"] > 0:
        text += f", ~{size(g['bytes_per_s'])}/s"
    return text
