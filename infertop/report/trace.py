"""Reports on torch.profiler (Kineto) traces: one file, or a directory with one trace per rank.

The document follows the schema-1 report; a trace has no py-spy samples, so ``stages`` and
``top_frames`` are empty and ``target`` is unknown. A directory of two or more traces is
imported in memory as ``infertop import DIR`` imports it (one process per rank) and reported as
that recording is — the ``processes`` section, the ``straggler`` finding — with ``ranks`` added:
each trace's own report, in rank order (every trace is read once, for both).
"""

from __future__ import annotations

import os
from typing import Any

from infertop.analysis.findings import evaluate
from infertop.analysis.findings.trace import trace_input
from infertop.config import Config, FindingThresholds
from infertop.report.evidence import evidence_summary
from infertop.report.records import (
    Op,
    Source,
    Target,
    TraceDirReport,
    TraceGpu,
    TraceReport,
    as_json,
    finding_record,
    memcpy_records,
    sync_records,
)
from infertop.report.schema import REPORT_VERSION, TOP_OPS
from infertop.trace.files import trace_files
from infertop.trace.gpu import summarize_gpu
from infertop.trace.table import KinetoTrace, read_trace


def _one(
    path: str, thresholds: FindingThresholds, data: bytes | None = None, trace: KinetoTrace | None = None
) -> TraceReport:
    trace = trace if trace is not None else read_trace(path, data)
    gpu = summarize_gpu(trace)
    inp = trace_input(trace, gpu)
    delay = gpu.launch_delay_us
    return TraceReport(
        infertop_report=REPORT_VERSION,
        source=Source("kineto", path),
        target=Target(None, None, None, None),
        rank=trace.rank,
        duration_s=round(inp.wall_us / 1e6, 6),
        stages=[],
        top_frames=[],
        ops=[
            Op(o.name, o.device, o.count, round(o.total_us, 3), round(o.self_us, 3))
            for o in inp.ops[:TOP_OPS]
        ],
        gpu=TraceGpu(
            available=trace.has_gpu,
            reason=None if trace.has_gpu else "the trace has no GPU events",
            device_names={str(k): v for k, v in trace.device_names.items()},
            kernel_time_us={k: round(v, 3) for k, v in gpu.kernel_time_us.items()},
            busy_share=None if gpu.busy_share is None else round(gpu.busy_share, 6),
            memcpy=memcpy_records(gpu.memcpy),
            memory=None,
            sync_events=gpu.sync_events,
            # the same rows as a recording's gpu.syncs: blocking calls and sync events by name
            syncs=sync_records(gpu.syncs),
            launch_delay_us=None
            if delay is None
            else {"p50": round(delay[0], 1), "p95": round(delay[1], 1)},
        ),
        findings=[finding_record(f) for f in evaluate(inp, thresholds)],
        warnings=[f"{trace.skipped} malformed events skipped"] if trace.skipped else [],
    )


def _by_rank(reports: list[TraceReport]) -> list[TraceReport]:
    return sorted(reports, key=lambda r: (r.rank is None, r.rank or 0))


def build_trace_report(
    path: str, thresholds: FindingThresholds | None = None, data: bytes | None = None
) -> dict[str, Any]:
    """``data``: the bytes of a single trace file, already read (see ``trace.files.Prefetch``)."""
    th = thresholds or FindingThresholds()
    files = trace_files(path)
    if not os.path.isdir(path):
        return as_json(_one(files[0], th, data))
    ranks = _by_rank([_one(f, th) for f in files])
    return as_json(TraceDirReport(REPORT_VERSION, Source("kineto", path), ranks))


def build_ranks_report(path: str, config: Config | None = None) -> dict[str, Any] | None:
    """The report of a directory of two or more traces, as ``import DIR`` + ``report`` give it,
    with each trace's own report as ``ranks``; None for a file or a directory of one trace.

    The recording lives in memory only: op windows (a few kB each, one per step) and
    definitions; each trace's columns are dropped before the next is read."""
    if not os.path.isdir(path):
        return None
    files = trace_files(path)
    if len(files) < 2:
        return None
    # here, past the checks: a single trace's report does not load the recording report's
    # modules (~110 ms of its start-up)
    from infertop.record.format import MAJOR, MINOR
    from infertop.record.import_ranks import rank_events
    from infertop.record.reader import Recording
    from infertop.report.recording import recording_report

    cfg = config or Config()
    th = cfg.findings
    own: list[TraceReport] = []
    ranks = rank_events(path, files, lambda _text: None, lambda f, trace: own.append(_one(f, th, trace=trace)))
    rec = Recording(path, (MAJOR, MINOR), ranks.prelude + list(ranks.windows))
    rep = recording_report(rec, cfg, kind="kineto", path=path).record
    rep.import_notes = list(ranks.notes)  # the clock; how ranks were numbered; traces left out
    rep.ranks = _by_rank(own)
    return as_json(rep)


def render_ranks_text(rep: dict[str, Any], markdown: bool = False) -> str:
    """A directory's report (``build_ranks_report``): the recording's text, then what import
    noted and where each rank's own trace report is."""
    from infertop.report.text import render_markdown, render_text  # here: as build_ranks_report
    body = render_markdown(rep) if markdown else render_text(rep)
    tail = [f"{'- ' if markdown else ''}import: {n}" for n in rep.get("import_notes", [])]
    tail.append(
        f"{'- ' if markdown else ''}each rank's own trace report: infertop report FILE, or "
        "`ranks` in --format json"
    )
    return body.rstrip("\n") + "\n\n" + "\n".join(tail) + "\n"


def render_trace_text(rep: dict[str, Any], markdown: bool = False) -> str:
    if "processes" in rep and "ranks" in rep:
        return render_ranks_text(rep, markdown)
    if "ranks" in rep:
        return "\n".join(render_trace_text(r, markdown) for r in rep["ranks"])
    h = "## " if markdown else ""
    rank = f" (rank {rep['rank']})" if rep.get("rank") is not None else ""
    out = [
        f"{'# ' if markdown else ''}infertop report — {rep['source']['path']}{rank} (torch.profiler trace)",
        f"profiled wall time: {rep['duration_s'] * 1000:.1f} ms",
        "",
        f"{h}findings:" if not markdown else f"{h}Findings",
    ]
    out += [f"warning: {w}" for w in rep.get("warnings", [])]
    if rep["findings"]:
        for f in rep["findings"]:
            where = f"  at {', '.join(f['where'][:3])}" if f["where"] else ""
            out.append(f"  [{f['severity']}] {f['rule']}: {f['title']}{where}")
            if evidence_summary(f["evidence"]):
                out.append(f"      evidence: {evidence_summary(f['evidence'])}")
            out.append(f"      fix: {f['hint']}")
    else:
        out.append("  none (no bottleneck rule fired)")
    g = rep["gpu"]
    out += ["", f"{h}gpu:" if not markdown else f"{h}GPU"]
    if not g["available"]:
        out.append(f"  not available — {g['reason']}")
    else:
        k = g["kernel_time_us"]
        busy = "?" if g["busy_share"] is None else f"{100 * g['busy_share']:.1f}%"
        out.append(
            f"  kernel time: compute {k['compute'] / 1000:.1f} ms, memory {k['memory'] / 1000:.1f} ms, "
            f"communication {k['communication'] / 1000:.1f} ms; busy {busy}"
        )
        for r in g["memcpy"]:
            out.append(
                f"  {r['kind']:<6} {r['host_memory']:<8} {r['count']:>6}× {r['bytes'] / 1e6:10.2f} MB "
                f"{r['total_us'] / 1000:9.2f} ms {r['mean_gbps']:8.2f} GB/s"
            )
    out += ["", f"{h}top ops by self time:" if not markdown else f"{h}Top ops by self time"]
    for o in rep["ops"][:15]:
        out.append(
            f"  {o['self_us'] / 1000:9.2f} ms self {o['total_us'] / 1000:9.2f} ms total "
            f"{o['count']:>6}×  [{o['device']}] {o['name'][:90]}"
        )
    return "\n".join(out) + "\n"
