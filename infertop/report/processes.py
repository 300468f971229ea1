"""The report's ``processes`` section (recordings made with ``--children``) and its text and
markdown renderings. ``null`` in the document when only the target was followed."""

from __future__ import annotations

from typing import Any

from infertop.analysis.processes import process_shares
from infertop.model.session import Session


def processes_section(session: Session, t: float | None = None) -> list[dict[str, Any]] | None:
    shares = process_shares(session, t)
    if not shares:
        return None
    rate = next((w.window.rate_hz for w in session.windows if w.window.rate_hz > 0), 0.0)
    t0 = session.t_first
    return [
        {
            "pid": p.pid,
            "ppid": p.ppid or None,
            "cmdline": p.cmdline,
            "role": p.role,
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


def processes_text(rep: dict[str, Any]) -> list[str]:
    procs = rep.get("processes")
    if not procs:
        return []
    out = [f"processes ({len(procs)} followed; the stages above are all of them merged):"]
    for p in procs:
        out.append(
            f"  pid {p['pid']:<8} {p['role']:<17} {p['samples']:>7} samples{_exit_note(p)}"
        )
        out.append(f"      {(p['cmdline'] or '?')[:100]}")
        out.append(f"      {_stage_list(p) or '(no active samples)'}")
    out.append("")
    return out


def processes_markdown(rep: dict[str, Any]) -> list[str]:
    procs = rep.get("processes")
    if not procs:
        return []
    out = ["", "## Processes", ""]
    out += [f"{len(procs)} followed; the stages above are all of them merged.", ""]
    out += ["| pid | role | samples | stages | command |", "|---:|---|---:|---|---|"]
    for p in procs:
        cmd = (p["cmdline"] or "?")[:100].replace("|", "\\|").replace("`", "'")
        out.append(
            f"| {p['pid']} | {p['role']}{_exit_note(p)} | {p['samples']} | "
            f"{_stage_list(p)} | `{cmd}` |"
        )
    return out
