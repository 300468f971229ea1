"""The text rendering of a diff."""

from __future__ import annotations

from infertop.compare.diff import DiffResult, Row


def _fmt(r: Row, x: float | None) -> str:
    if x is None:
        return "—"
    if r.unit == "share":
        return f"{100 * x:.1f}%"
    if r.unit == "ms":
        return f"{x:.2f} ms"
    if r.unit == "bytes":
        return f"{x / 2**20:.1f} MiB"
    if r.unit == "B/s":
        return f"{x / 1024:.1f} KiB/s"
    return f"{x / 1000:.3f} ms" if x >= 1000 else f"{x:.1f} µs"


def _change(r: Row) -> str:
    c = r.change_pct
    if c is None:
        return "" if r.base is None or r.new is None else "  (new)"
    if c == float("inf"):
        return "  (was 0)"
    return f"  {c:+.1f}%"


def render_text(res: DiffResult) -> str:
    per = "per step" if res.per == "step" else "per profiled second"
    out = [
        f"infertop diff — base {res.base.path} ({res.base.kind}) vs new {res.new.path} ({res.new.kind})",
        f"ops, kernels and GPU time are {per}"
        + (f" (base {res.base.steps} steps, new {res.new.steps})" if res.per == "step" else ""),
    ]
    out += [f"note: {n}" for n in res.notes]
    for w in (res.base.warning, res.new.warning):
        if w:
            out.append(f"warning: {w}")
    sections = (
        ("latency", "latency (per call)"),
        ("stage share", "stage shares of wall time (pipeline threads)"),
        ("stage share (cpu)", "stage shares of CPU time (active samples)"),
        ("gpu per step", "GPU time"),
        ("gpu per s", "GPU time"),
        ("memory", "host memory (peak RSS of all processes; growth of the fastest-growing one)"),
        ("torch memory", "torch memory (the largest peak of a forward call; --profile-memory)"),
    )
    for what, title in sections:
        rows = [r for r in res.rows if r.what == what]
        if not rows:
            continue
        out += ["", f"{title}:"]
        for r in rows:
            flag = "  REGRESSION" if r in res.regressions else ""
            out.append(
                f"  {r.name[:48]:<48} {_fmt(r, r.base):>12} → {_fmt(r, r.new):>12}{_change(r)}{flag}"
            )
    for title, movers, share in (
        ("torch ops that moved most (self time)", res.ops, False),
        ("kernels and copies that moved most", res.kernels, False),
        ("Python frames that moved most (self share of samples)", res.frames, True),
    ):
        if not movers:
            continue
        out += ["", f"{title}:"]
        for m in movers:
            if share:
                out.append(f"  {100 * m.base:6.1f}% → {100 * m.new:6.1f}%  {m.name[:90]}")
            else:
                out.append(f"  {m.base / 1000:9.3f} ms → {m.new / 1000:9.3f} ms  {m.name[:90]}")
    if res.findings_new or res.findings_gone:
        out += ["", "findings:"]
        out += [f"  new:  [{f.severity}] {f.rule}: {f.title}" for f in res.findings_new]
        out += [f"  gone: [{f.severity}] {f.rule}: {f.title}" for f in res.findings_gone]
    out.append("")
    if res.fail_above is None:
        out.append("no threshold given (--fail-above PCT): nothing gated")
    elif res.regressions:
        out.append(
            f"REGRESSED: {len(res.regressions)} compared number(s) grew more than {res.fail_above:g}%: "
            + ", ".join(
                f"{r.name} ({r.change_pct:+.1f}%)" if r.change_pct != float("inf") else r.name
                for r in res.regressions
            )
        )
    else:
        out.append(f"ok: nothing compared grew more than {res.fail_above:g}%")
    return "\n".join(out) + "\n"
