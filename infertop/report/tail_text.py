"""The text and markdown of the report's slow calls: each stage's tail, GC pauses and
event-loop lag (they only format ``stages[i].tail``, ``gc`` and ``event_loop``)."""

from __future__ import annotations

from typing import Any

#: overlaps as the text names them (the profiler windows are infertop's own)
OVERLAP_NAMES = {
    "gc": "garbage collection",
    "gil": "GIL held elsewhere",
    "queue": "waiting in a queue",
    "sync": "host-device sync",
    "profiler": "infertop's own profiler windows",
    "memory": "memory pressure (major faults, stalls)",
}


def _file(path: str, line: int) -> str:
    parts = path.replace("\\", "/").rsplit("/", 2)
    return f"{'/'.join(parts[-2:])}:{line}"


def pause_lines(rep: dict[str, Any]) -> list[str]:
    """A line for named requests, one for GC pauses, one for event-loop lag (each when seen)."""
    out = []
    req = rep.get("requests")
    if req:
        lat = req["latency_ms"]
        slow = ", ".join(f"{k} {100 * v['slowest_share']:.0f}%" for k, v in list(req["stages"].items())[:4])
        rate = f" ({req['per_s']:.1f}/s)" if req.get("per_s") else ""
        out.append(
            f"requests: {req['count']}{rate}, p50 {lat['p50']:.1f} ms  p95 {lat['p95']:.1f} ms  "
            f"p99 {lat['p99']:.1f} ms; the slowest {len(req['slowest'])} spent: {slow}"
        )
        parts = [f"{st} {v['p50']:.1f}/{v['p99']:.1f}" for st, v in (req.get("breakdown_ms") or {}).items()]
        if parts:
            how = "joined by time, approximate" if req.get("joined") == "time" else "by request id"
            out.append(f"  a request's stages, p50/p99 ms ({how}): {', '.join(parts)}")
        for r in req.get("by_route", [])[:5]:
            ms = r["latency_ms"]
            out.append(
                f"  {r['route']}: {r['count']}, p50 {ms['p50']:.1f} ms  p95 {ms['p95']:.1f} ms  "
                f"p99 {ms['p99']:.1f} ms"
            )
    gc = rep.get("gc")
    if gc:
        gens = ", ".join(f"gen {g['generation']}: {g['count']}× p99 {g['p99_ms']:.1f} ms" for g in gc["generations"])
        out.append(
            f"garbage collection: {gc['count']['total']} collections, {gc['total_s'] * 1000:.0f} ms "
            f"({100 * gc['share']:.1f}% of wall time), longest {gc['max_ms']:.1f} ms ({gens})"
        )
    lag = rep.get("event_loop")
    if lag:
        ms = lag["lag_ms"]
        out.append(
            f"event-loop lag: p50 {ms['p50']:.1f} ms  p99 {ms['p99']:.1f} ms  max {ms['max']:.1f} ms "
            f"({lag['beats']} heartbeats on {lag['loops']} loop{'s' if lag['loops'] != 1 else ''})"
        )
    return out


def _overlaps(tail: dict[str, Any]) -> str:
    parts = [
        f"{OVERLAP_NAMES[k]} {100 * v:.0f}%"
        for k, v in tail["overlaps"].items()
        if v is not None and v >= 0.005
    ]
    return ", ".join(parts) if parts else "nothing measured"


def tail_lines(rep: dict[str, Any]) -> list[str]:
    """Each stage with a tail: its slow calls, the frames they have more of, what they overlapped."""
    out = []
    for st in rep["stages"]:
        tail = st.get("tail")
        if not tail or not tail["slow_calls"]:
            continue
        how = "given" if tail["threshold"] == "given" else "its p99"
        out.append(
            f"  {st['name']}: {tail['slow_calls']} of {tail['calls']} calls ≥ "
            f"{tail['threshold_ms']:.1f} ms ({how}); slowest {tail['slowest'][0]['duration_ms']:.1f} ms"
        )
        if tail["frames"]:
            out.append("    slow calls spend more time in (share of slow-call samples, typical):")
            for f in tail["frames"][:5]:
                out.append(
                    f"      {100 * f['slow_share']:5.1f}%  (typical {100 * f['typical_share']:4.1f}%)  "
                    f"{f['name']}  {_file(f['file'], f['line'])}"
                )
        elif tail["samples"]["slow"] == 0:
            out.append(
                "    no call samples: stage rules (--stage) on Python >= 3.10 or infertop.stage "
                "annotations, with the agent, tie stacks to calls"
            )
        stages = [
            f"{name} {100 * v['slow_share']:.0f}% (typical {100 * v['typical_share']:.0f}%)"
            for name, v in list((tail.get("stages") or {}).items())[:4]
        ]
        if len(stages) > 1:
            out.append("    by stage: " + ", ".join(stages))
        out.append(f"    overlapped: {_overlaps(tail)}")
    return ["slow calls (the tail of each stage):", *out, ""] if out else []


def tail_markdown(rep: dict[str, Any]) -> list[str]:
    out = []
    for st in rep["stages"]:
        tail = st.get("tail")
        if not tail or not tail["slow_calls"]:
            continue
        slow = f"{tail['slow_calls']} of {tail['calls']} calls ≥ {tail['threshold_ms']:.1f} ms"
        out += ["", f"### {st['name']}: {slow}", ""]
        if tail["frames"]:
            out += ["| slow | typical | function | where |", "|---:|---:|---|---|"]
            for f in tail["frames"][:5]:
                out.append(
                    f"| {100 * f['slow_share']:.1f}% | {100 * f['typical_share']:.1f}% | "
                    f"`{f['name']}` | `{_file(f['file'], f['line'])}` |"
                )
            out.append("")
        out.append(f"Overlapped: {_overlaps(tail)}.")
    pauses = pause_lines(rep)
    head = ["", "## Slow calls"] if out or pauses else []
    return head + (["", *[f"- {line}" for line in pauses]] if pauses else []) + out
