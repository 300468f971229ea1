"""The report's ``processes`` section (recordings made with ``--children``, imported rank
directories, merged recordings) and its text and markdown renderings; ``null`` in the document
when the recording is of one process. Also the findings about one process among the others
(``straggler``), which only a many-process recording can raise."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from infertop.analysis.cpu_contention import waited_by_pid
from infertop.analysis.findings import evaluate, severity_rank
from infertop.analysis.findings.session import snapshot_input
from infertop.analysis.processes.ops import process_ops
from infertop.analysis.processes.roles import host_of, rank_of
from infertop.analysis.processes.shares import process_shares
from infertop.analysis.session import Session
from infertop.analysis.snapshot import build_snapshot
from infertop.analysis.stragglers import comparison, straggler_findings
from infertop.config import FindingThresholds
from infertop.report.records import Report, finding_record
from infertop.words import plural


def add_processes(
    rep: Report, session: Session, t: float | None, th: FindingThresholds | None = None
) -> None:
    """The ``processes`` section, and the per-process findings among the others."""
    rep.processes = procs = processes_section(session, t)
    if not procs:
        return
    for proc in procs:  # the rules on each process's own samples and ops
        proc["findings"] = process_findings(session, t, proc["pid"], th)
    names = {p["pid"]: f"{p['role']} (pid {p['pid']})" for p in procs}
    steps, unit = comparison(session, t)
    waited = waited_by_pid(session.cpu_contention(t))
    found = [finding_record(f) for f in straggler_findings(steps, names, th, unit, waited)]
    if found:
        rep.findings = sorted(rep.findings + found, key=lambda f: severity_rank(f.severity))


def process_findings(
    session: Session, t: float | None, pid: int, th: FindingThresholds | None = None
) -> list[dict[str, Any]]:
    """The findings of one process: every rule evaluated on its samples and its agent's ops
    alone (as the UI's view of that process shows them), each naming the process."""
    snap = build_snapshot(session, t=t, process=pid)
    if snap.process != pid:
        return []
    return [replace(f, pid=pid).as_dict() for f in evaluate(snapshot_input(snap), th)]


def processes_section(session: Session, t: float | None = None) -> list[dict[str, Any]] | None:
    shares = process_shares(session, t)
    if not shares:
        return None
    ops = process_ops(session, t)
    hosts = host_of(session)
    ranks = [r for p in shares if (r := rank_of(p.cmdline)) is not None]
    if len(ranks) == len(shares):  # an imported rank directory: in rank order
        shares = [p for _, p in sorted(zip(ranks, shares), key=lambda rp: rp[0])]
    rate = next((w.window.rate_hz for w in session.windows if w.window.rate_hz > 0), 0.0)
    t0 = session.t_first
    return [
        {
            "pid": p.pid,
            "ppid": p.ppid or None,
            "cmdline": p.cmdline,
            "role": p.role,
            "host": hosts.get(p.pid),
            "samples": p.samples,
            "stages": [
                {
                    "name": name,
                    "share": round(n / p.samples, 6),
                    "seconds": round(n / rate, 3) if rate else None,
                    "samples": n,
                }
                for name, n in p.stages
            ],
            "gpu_memory_bytes": p.gpu_memory,
            "exited_after_s": None if p.exited_t is None else round(max(0.0, p.exited_t - t0), 3),
            "ops": ops[p.pid].as_dict() if p.pid in ops else None,
        }
        for p in shares
    ]


def _stage_list(proc: dict[str, Any]) -> str:
    return ", ".join(f"{s['name']} {100 * s['share']:.1f}%" for s in proc["stages"][:6])


def _exit_note(proc: dict[str, Any]) -> str:
    gone = proc.get("exited_after_s")
    gpu = proc.get("gpu_memory_bytes")
    note = "" if not gpu else f", {gpu / 2**30:.2f} GiB GPU memory"
    return note + ("" if gone is None else f" — exited after {gone:.1f} s")


def _ops_note(proc: dict[str, Any]) -> str:
    """Torch-profiler numbers of one process: steps, kernel time, GPU busy."""
    o = proc.get("ops")
    if not o:
        return ""
    parts = [f"{o['windows']} {plural(o['windows'], 'profiler window')}"]
    if o["steps"]:
        parts.append(f"{o['steps']} steps, p50 {o['step_ms_p50']:.1f} ms")
        if o["step_work_ms_p50"] is not None and o["step_work_ms_p50"] < o["step_ms_p50"] - 0.05:
            parts.append(f"{o['step_work_ms_p50']:.1f} ms without NCCL")
    k = o["kernel_time_us"]
    if any(k.values()):
        parts.append(
            f"kernels {k['compute'] / 1000:.1f} ms compute, {k['communication'] / 1000:.1f} ms NCCL"
        )
    if o["gpu_busy_share"] is not None:
        parts.append(f"GPU busy {100 * o['gpu_busy_share']:.0f}%")
    return ", ".join(parts)


def processes_text(rep: dict[str, Any]) -> list[str]:
    procs = rep.get("processes")
    if not procs:
        return []
    out = [f"processes ({len(procs)}; the numbers above are all of them merged):"]
    for p in procs:
        out.append(
            f"  pid {p['pid']:<8} {p['role']:<17} {p['samples']:>7} "
            f"{plural(p['samples'], 'sample')}{_exit_note(p)}"
        )
        out.append(f"      {(p['cmdline'] or '?')[:100]}")
        if p["samples"] or not p.get("ops"):
            out.append(f"      {_stage_list(p) or '(no active samples)'}")
        if p.get("ops"):
            out.append(f"      {_ops_note(p)}")
        for f in p.get("findings") or ():
            out.append(f"      [{f['severity']}] {f['rule']}: {f['title']}")
    out.append("")
    return out


def processes_markdown(rep: dict[str, Any]) -> list[str]:
    procs = rep.get("processes")
    if not procs:
        return []
    out = ["", "## Processes", ""]
    n = len(procs)
    out += [f"{n} {plural(n, 'process')}; the numbers above are all of them merged.", ""]
    out += ["| pid | role | samples | stages | torch profiler | findings | command |",
            "|---:|---|---:|---|---|---|---|"]  # fmt: skip
    for p in procs:
        cmd = (p["cmdline"] or "?")[:100].replace("|", "\\|").replace("`", "'")
        found = ", ".join(f"{f['rule']} ({f['severity']})" for f in p.get("findings") or ())
        out.append(
            f"| {p['pid']} | {p['role']}{_exit_note(p)} | {p['samples']} | "
            f"{_stage_list(p)} | {_ops_note(p)} | {found} | `{cmd}` |"
        )
    return out
