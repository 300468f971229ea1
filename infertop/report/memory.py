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


def _batch(t: TorchMemory, gpu_memory: dict[str, Any] | None) -> dict[str, Any] | None:
    """At the largest batch a profiled forward call had (its first tensor argument's rows), the
    call's peak and, on CUDA where the device's memory is known, how many more rows would fit
    in what is left of it: the device's free memory (NVML) and the allocator's cached slack,
    over the peak per row (the peak taken as growing in proportion to the rows)."""
    if not t.by_rows:
        return None
    rows = max(r for r, _d, _p in t.by_rows)
    at = [(d, p) for r, d, p in t.by_rows if r == rows]
    device, peak = max(at, key=lambda dp: (dp[0] == "cuda", dp[1]))
    per_row = peak / rows if rows else None
    free = None
    g = gpu_memory or {}
    if device == "cuda" and g.get("free") is not None:
        reserved, allocated = g.get("reserved"), g.get("allocated")
        slack = reserved - allocated if reserved is not None and allocated is not None else 0
        free = g["free"] + max(0, slack)
    return {
        "rows": rows,
        "device": device,
        "peak_bytes": peak,
        "peak_per_row_bytes": None if per_row is None else round(per_row, 1),
        "free_bytes": free,
        "more_rows": int(free // per_row) if free is not None and per_row else None,
    }


def torch_dict(t: TorchMemory | None, gpu_memory: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``torch`` record: by stage and device, the peak of a forward call, the ops, the
    headroom at the largest batch (``gpu_memory``: the report's ``gpu.memory``)."""
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
        "batch": _batch(t, gpu_memory),
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


def memory_dict(
    m: HostMemorySummary | None, torch: TorchMemory | None = None, gpu_memory: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """None when no process's memory was read (a recording made before format 1.8, an import)
    and no model call was profiled with ``profile_memory``."""
    if m is None:
        if torch is None:
            return None
        return {"processes": [], "growth_bytes_per_s": None, "torch": torch_dict(torch, gpu_memory), "growing": []}
    return {
        "processes": [_process(p) for p in m.processes],
        "growth_bytes_per_s": _r(m.growth_bytes_per_s, 1),
        "torch": torch_dict(torch, gpu_memory),
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
    if not m:
        return []
    torch_lines = torch_memory_lines(m.get("torch"))
    if not m.get("processes"):
        return torch_lines + [""] if torch_lines else []
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
    return lines + torch_lines + [""]


def torch_memory_lines(t: dict[str, Any] | None) -> list[str]:
    """The torch allocator's bytes per call by stage and the ops that allocate the most, from
    the model calls profiled with ``profile_memory``."""
    if not t:
        return []
    n = t["windows"]
    lines = [f"torch memory ({n} profiler window{'s' if n != 1 else ''} with profile_memory):"]
    for stage, devices in t["by_stage"].items():
        for device, d in devices.items():
            if not d["calls"]:
                lines.append(f"  {stage} ({device}): {size(d['alloc_bytes'])} allocated")
                continue
            lines.append(
                f"  {stage} ({device}): {size(d['alloc_bytes_per_call'])} allocated per call, "
                f"peak {size(d['peak_per_call_bytes'])} per call (max {size(d['peak_max_bytes'])})"
            )
    b = t.get("batch")
    if b:
        line = f"  at the largest batch seen ({b['rows']} rows): peak {size(b['peak_bytes'])} per forward call"
        if b.get("more_rows") is not None:
            line += f"; ~{b['more_rows']:,} more rows would fit in the {size(b['free_bytes'])} left on the device"
        lines.append(line)
    for o in t["ops"][:5]:
        per = o["alloc_bytes_per_call"]
        amount = f"{size(per)} per call" if per is not None else size(o["alloc_bytes"])
        lines.append(f"    {o['op']} ({o['stage']}, {o['device']}): {amount}")
    return lines


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
