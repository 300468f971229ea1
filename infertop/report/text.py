"""Plain-text and markdown renderings of a report document (they only format, never compute)."""

from __future__ import annotations

from typing import Any


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}%"


def _latency(st: dict[str, Any]) -> str:
    lat = st.get("latency_ms")
    if not lat:
        return ""
    return f"p50 {lat['p50']:.1f} ms  p95 {lat['p95']:.1f} ms  p99 {lat['p99']:.1f} ms  ({st['calls']} calls)"


def _where(f: dict[str, Any]) -> str:
    parts = f["file"].replace("\\", "/").rsplit("/", 2)
    return f"{'/'.join(parts[-2:])}:{f['line']}"


def render_text(rep: dict[str, Any]) -> str:
    t = rep["target"]
    out = [
        f"infertop report — {rep['source']['path']} ({rep['source']['kind']})",
        f"target: pid {t['pid']}  python {t['python'] or '?'}  {t['cmdline'] or ''}".rstrip(),
        f"duration: {rep['duration_s']:.1f} s   samples: {rep['sampling']['samples']} at "
        f"{rep['sampling']['rate_hz']:g} Hz   errors: {rep['sampling']['errors']}",
    ]
    out += [f"warning: {w}" for w in rep.get("warnings", [])]
    if rep.get("target_exited"):
        out.append("the target exited during the session")
    out.append("")
    out.append("findings:")
    if rep["findings"]:
        for f in rep["findings"]:
            out.append(f"  [{f['severity']}] {f['rule']}: {f['title']}")
            out.append(f"      fix: {f['hint']}")
    else:
        out.append("  none (no bottleneck rule fired)")
    out.append("")
    out.append("where the active time goes (share of active thread samples):")
    for st in rep["stages"]:
        bar = "█" * round(30 * st["share"])
        out.append(f"  {st['name']:<12} {_pct(st['share'])}  {st['seconds']:8.2f} s  {bar} {_latency(st)}".rstrip())
    if rep.get("idle"):
        out.append(f"  (idle: {_pct(rep['idle']['share_of_all'])} of all thread time)")
    out.append("")
    out.append("hottest frames (self share):")
    for f in rep["top_frames"][:15]:
        out.append(
            f"  {_pct(f['self_share'])} self {_pct(f['total_share'])} total  "
            f"[{f['stage']}] {f['function']}  {_where(f)}"
        )
    out.append("")
    g = rep["gpu"]
    out.append("gpu: " + ("available" if g["available"] else f"not available — {g['reason']}"))
    return "\n".join(out) + "\n"


def render_markdown(rep: dict[str, Any]) -> str:
    t = rep["target"]
    out = [
        f"# infertop report: pid {t['pid']}",
        "",
        f"- source: `{rep['source']['path']}` ({rep['source']['kind']})",
        f"- command: `{t['cmdline'] or '?'}` (python {t['python'] or '?'})",
        f"- duration: {rep['duration_s']:.1f} s, {rep['sampling']['samples']} samples at "
        f"{rep['sampling']['rate_hz']:g} Hz",
    ]
    out += [f"- **warning:** {w}" for w in rep.get("warnings", [])]
    out += ["", "## Findings", ""]
    if rep["findings"]:
        for f in rep["findings"]:
            out.append(f"- **{f['severity']}** `{f['rule']}` — {f['title']}. Fix: {f['hint']}")
    else:
        out.append("No bottleneck rule fired.")
    out += ["", "## Stages", "", "| stage | share | seconds | p50 ms | p99 ms | calls |", "|---|---:|---:|---:|---:|---:|"]
    for st in rep["stages"]:
        lat = st["latency_ms"] or {}
        p50 = f"{lat['p50']:.1f}" if lat else ""
        p99 = f"{lat['p99']:.1f}" if lat else ""
        out.append(
            f"| {st['name']} | {100 * st['share']:.1f}% | {st['seconds']:.2f} | {p50} | {p99} | {st['calls'] or ''} |"
        )
    out += ["", "## Hottest frames", "", "| self | total | stage | function | where |", "|---:|---:|---|---|---|"]
    for f in rep["top_frames"][:15]:
        out.append(
            f"| {100 * f['self_share']:.1f}% | {100 * f['total_share']:.1f}% | {f['stage']} | "
            f"`{f['function']}` | `{_where(f)}` |"
        )
    g = rep["gpu"]
    out += ["", "## GPU", "", "available" if g["available"] else f"Not available: {g['reason']}", ""]
    return "\n".join(out)
