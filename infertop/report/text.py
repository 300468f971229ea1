"""Plain-text and markdown renderings of a report document (they only format, never compute)."""

from __future__ import annotations

from typing import Any

from infertop.report.engine import engine_lines
from infertop.report.evidence import evidence_summary
from infertop.report.generation import generation_lines
from infertop.report.memory import memory_lines
from infertop.report.processes import processes_markdown, processes_text
from infertop.report.tail_text import pause_lines, tail_lines, tail_markdown
from infertop.words import plural


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


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms"


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def _profiled(rep: dict[str, Any]) -> str:
    p = rep.get("profiler") or {}
    cut = f", {p['truncated']} cut short" if p.get("truncated") else ""
    n = p.get("windows", 0)
    return f"{n} {plural(n, 'torch-profiler window')}, {p.get('seconds', 0):.1f} s profiled{cut}"


def _gpu_lines(g: dict[str, Any]) -> list[str]:
    """The GPU numbers (kernel time, busy share, copies, memory), one fact a line."""
    out = []
    k = g["kernel_time_us"]
    if any(k.values()):
        busy = "" if g["busy_share"] is None else f"; busy {100 * g['busy_share']:.1f}% of the profiled span"
        out.append(
            f"kernel time: compute {_ms(k['compute'])}, memory {_ms(k['memory'])}, "
            f"communication {_ms(k['communication'])}{busy}"
        )
    for r in g["memcpy"]:
        out.append(
            f"{r['kind']:<6} {r['host_memory']:<8} {r['count']:>6}× {r['bytes'] / 1e6:10.2f} MB "
            f"{_ms(r['total_us']):>11} {r['mean_gbps']:8.2f} GB/s"
        )
    m = g.get("memory")
    if m and m.get("allocated") is not None:
        out.append(
            f"memory (cuda:{m['device']}): allocated {_gib(m['allocated'])}, reserved "
            f"{_gib(m['reserved'])}, peak {_gib(m['peak_allocated'])}, "
            f"{m['alloc_retries']} allocator retries, {m['ooms']} OOMs"
        )
    if m and m.get("total") is not None:
        mine = "" if m.get("process") is None else f"this process {_gib(m['process'])}, "
        others = "" if m.get("others") is None else f"others {_gib(m['others'])}, "
        out.append(
            f"device memory (GPU {m['nvml_device']}): {mine}{others}"
            f"free {_gib(m['free'] or 0)} of {_gib(m['total'])}"
        )
    out += _utilization_lines(g.get("utilization") or [])
    return out


def _utilization_lines(devices: list[dict[str, Any]]) -> list[str]:
    """One line per GPU from NVML: mean / p95 utilisation, bandwidth, power, throttling."""
    out = []
    for d in devices:
        parts = []
        for key, label in (("util_gpu", "SM busy"), ("util_memory", "mem busy"),
                           ("dram_bw_util", "DRAM bw"), ("tensor_util", "tensor")):  # fmt: skip
            st = d.get(key)
            if st:
                parts.append(f"{label} {st['mean']:.0f}% (p95 {st['p95']:.0f}%)")
        rx, tx = d.get("pcie_rx_kbs"), d.get("pcie_tx_kbs")
        if rx and tx:
            parts.append(f"PCIe rx {rx['mean'] / 1e6:.2f} tx {tx['mean'] / 1e6:.2f} GB/s")
        if d.get("power_w"):
            parts.append(f"{d['power_w']['mean']:.0f} W")
        throttle = {k: v for k, v in (d.get("throttle") or {}).items() if k != "gpu_idle"}
        if throttle:
            parts.append("throttled: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in throttle.items()))
        mark = " (target)" if d.get("target") else ""
        out.append(f"GPU {d['index']} {d.get('name') or ''}{mark}: " + ("; ".join(parts) or "no utilisation readings"))
    return out


def render_text(rep: dict[str, Any]) -> str:
    t = rep["target"]
    out = [
        f"infertop report — {rep['source']['path']} ({rep['source']['kind']})",
        f"target: pid {t['pid']}  python {t['python'] or '?'}  {t['cmdline'] or ''}".rstrip(),
        f"duration: {rep['duration_s']:.1f} s   samples: {rep['sampling']['samples']} at "
        f"{rep['sampling']['rate_hz']:g} Hz   errors: {rep['sampling']['errors']}",
    ]
    out += [f"warning: {w}" for w in rep.get("warnings", [])]
    out += [f"sampling: {n}" for n in rep["sampling"].get("notes", [])]
    out += [
        f"incident at {i['at_s']:.1f} s ({i['trigger']}): {i['reason']}"
        for i in rep.get("incidents", [])
    ]
    if rep.get("target_exited"):
        out.append("the target exited during the session")
    out.append("")
    out.append("findings:")
    if rep["findings"]:
        for f in rep["findings"]:
            proc = f" (pid {f['pid']})" if f.get("pid") is not None else ""
            out.append(f"  [{f['severity']}] {f['rule']}{proc}: {f['title']}")
            if evidence_summary(f["evidence"]):
                out.append(f"      evidence: {evidence_summary(f['evidence'])}")
            if f["where"]:
                out.append(f"      at: {'; '.join(f['where'][:3])}")
            out.append(f"      fix: {f['hint']}")
    else:
        out.append("  none (no bottleneck rule fired)")
    out.append("")
    wall = "wall" in rep["sampling"].get("views", ("wall",))
    if wall:
        out.append("where the time goes (wall time of the pipeline threads; cpu: share of active samples):")
    else:
        out.append("where the active time goes (share of active thread samples; no wall windows in this recording):")
    for st in rep["stages"]:
        bar = "█" * round(30 * st["share"])
        cpu = f"  cpu {_pct(st.get('cpu_share', st['share']))}" if wall else ""
        out.append(
            f"  {st['name']:<12} {_pct(st['share'])}{cpu}  {st['seconds']:8.2f} s  {bar} "
            f"{_latency(st)}".rstrip()
        )
    if rep.get("idle"):  # a share of a larger whole than the stages' 100 %
        whose = "all thread time"
        if wall:
            whose = "the pipeline threads' time, waiting outside every stage"
        idle = 100 * rep["idle"]["share_of_all"]
        out.append(f"  idle (not in the shares above): {idle:.1f}% of {whose}")
    if not rep["stages"] and not rep["sampling"]["samples"]:
        out.append("  (no Python samples in this recording)")
    out.append("")
    out += tail_lines(rep)
    out += generation_lines(rep)
    out += engine_lines(rep)
    out += memory_lines(rep)
    pauses = pause_lines(rep)
    out += pauses + ([""] if pauses else [])
    out += processes_text(rep)
    if rep.get("ops"):
        out.append(f"top torch ops by self time ({_profiled(rep)}):")
        for o in rep["ops"][:15]:
            out.append(
                f"  {_ms(o['self_us']):>11} self {_ms(o['total_us']):>11} total {o['count']:>7}×  "
                f"[{o.get('stage', '?')}] [{o['device']}] {o['name'][:80]}"
            )
        out.append("")
    out.append("hottest frames (self share):")
    if not rep["top_frames"]:
        out.append("  (none)")
    for f in rep["top_frames"][:15]:
        out.append(
            f"  {_pct(f['self_share'])} self {_pct(f['total_share'])} total  "
            f"[{f['stage']}] {f['function']}  {_where(f)}"
        )
    out.append("")
    g = rep["gpu"]
    out.append("gpu: " + ("available" if g["available"] else f"not available — {g['reason']}"))
    out += [f"  {line}" for line in _gpu_lines(g)]
    return "\n".join(out) + "\n"


def render_markdown(rep: dict[str, Any]) -> str:
    t = rep["target"]
    samples = rep["sampling"]["samples"]
    out = [
        f"# infertop report: pid {t['pid']}",
        "",
        f"- source: `{rep['source']['path']}` ({rep['source']['kind']})",
        f"- command: `{t['cmdline'] or '?'}` (python {t['python'] or '?'})",
        f"- duration: {rep['duration_s']:.1f} s, {samples} {plural(samples, 'sample')} at "
        f"{rep['sampling']['rate_hz']:g} Hz",
    ]
    out += [f"- **warning:** {w}" for w in rep.get("warnings", [])]
    out += [
        f"- **incident** at {i['at_s']:.1f} s ({i['trigger']}): {i['reason']}"
        for i in rep.get("incidents", [])
    ]
    out += ["", "## Findings", ""]
    if rep["findings"]:
        for f in rep["findings"]:
            where = f" At {', '.join(f'`{w}`' for w in f['where'][:3])}." if f["where"] else ""
            proc = f" (pid {f['pid']})" if f.get("pid") is not None else ""
            ev = evidence_summary(f["evidence"])
            ev = f" Evidence: {ev}." if ev else ""
            out.append(
                f"- **{f['severity']}** `{f['rule']}`{proc} — {f['title']}.{ev}{where} "
                f"Fix: {f['hint']}"
            )
    else:
        out.append("No bottleneck rule fired.")
    out += [
        "",
        "## Stages",
        "",
        "| stage | wall share | cpu share | seconds | p50 ms | p99 ms | calls |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for st in rep["stages"]:
        lat = st["latency_ms"] or {}
        p50 = f"{lat['p50']:.1f}" if lat else ""
        p99 = f"{lat['p99']:.1f}" if lat else ""
        cpu = 100 * st.get("cpu_share", st["share"])
        out.append(
            f"| {st['name']} | {100 * st['share']:.1f}% | {cpu:.1f}% | {st['seconds']:.2f} "
            f"| {p50} | {p99} | {st['calls'] or ''} |"
        )
    out += tail_markdown(rep)
    out += processes_markdown(rep)
    if rep.get("ops"):
        out += ["", "## Top torch ops", "", f"By self time; {_profiled(rep)}.", ""]
        out += ["| self ms | total ms | calls | mean µs | stage | device | op |", "|---:|---:|---:|---:|---|---|---|"]
        for o in rep["ops"][:15]:
            name = o["name"].replace("|", "\\|")
            out.append(
                f"| {o['self_us'] / 1000:.2f} | {o['total_us'] / 1000:.2f} | {o['count']} | "
                f"{o.get('mean_us', 0):.1f} | {o.get('stage', '')} | {o['device']} | `{name}` |"
            )
    out += ["", "## Hottest frames", "", "| self | total | stage | function | where |", "|---:|---:|---|---|---|"]
    for f in rep["top_frames"][:15]:
        out.append(
            f"| {100 * f['self_share']:.1f}% | {100 * f['total_share']:.1f}% | {f['stage']} | "
            f"`{f['function']}` | `{_where(f)}` |"
        )
    g = rep["gpu"]
    out += ["", "## GPU", "", "available" if g["available"] else f"Not available: {g['reason']}"]
    out += [f"- {line}" for line in _gpu_lines(g)]
    out.append("")
    return "\n".join(out)
