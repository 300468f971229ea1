"""The schema-2 report of a recording (spec: "report --format json"), built from a snapshot as
typed records (``report/records.py``)."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from infertop.analysis.findings import evaluate
from infertop.analysis.findings.session import snapshot_input
from infertop.analysis.gpu_series import memory_summary, utilization_summary
from infertop.analysis.snapshot import Snapshot
from infertop.analysis.stages import IDLE
from infertop.config import FindingThresholds
from infertop.report.engine import engine_dict
from infertop.report.generation import generation_record
from infertop.report.memory import memory_dict
from infertop.report.pauses import gc_record, loop_record, requests_record, tail_record
from infertop.report.records import (
    Gpu,
    Idle,
    Latency,
    Op,
    Profiler,
    Report,
    Sampling,
    Source,
    Stage,
    Target,
    TopFrame,
    as_json,
    finding_record,
    memcpy_records,
    sync_records,
)
from infertop.report.schema import REPORT_VERSION, TOP_OPS
from infertop.words import plural


def _r(x: float, nd: int = 6) -> float:
    return round(float(x), nd)


def build_report(
    snap: Snapshot, source_kind: str, path: str, thresholds: FindingThresholds | None = None
) -> dict[str, Any]:
    """``build_record``'s report as its JSON document."""
    return as_json(build_record(snap, source_kind, path, thresholds))


def build_record(
    snap: Snapshot, source_kind: str, path: str, thresholds: FindingThresholds | None = None
) -> Report:
    """The report of one snapshot (a recording replayed to its end) as typed records: the
    processes section and incidents are added by ``report.recording``."""
    stages = []
    idle = None
    tails = {t.stage: t for t in snap.tails}
    wall = snap.wall_totals or snap.totals
    cpu = {st.name: st for st in snap.cpu_totals or snap.totals}
    by_name = {st.name: st for st in wall}
    names = list(by_name) + [n for n in cpu if n not in by_name]
    for name in names:
        st = by_name.get(name)
        if name == IDLE:
            if st is not None:
                idle = Idle(_r(st.share), _r(st.seconds, 3), st.samples)
            continue
        c = cpu.get(name)
        timed = st if st is not None else c
        assert timed is not None
        lat = timed.latency_ms
        stages.append(
            Stage(
                name=name,
                share=_r(st.share) if st is not None else 0.0,
                cpu_share=_r(c.share) if c is not None else 0.0,
                seconds=_r(st.seconds, 3) if st is not None else 0.0,
                samples=st.samples if st is not None else 0,
                cpu_samples=c.samples if c is not None else 0,
                calls=timed.calls,
                latency_ms=None if lat is None else Latency(_r(lat.p50, 3), _r(lat.p95, 3), _r(lat.p99, 3)),
                tail=tail_record(tails[name]) if name in tails else None,
                by_batch=[
                    {"batch": b.batch, "calls": b.calls, "latency_ms_p50": _r(b.latency_ms_p50, 3)}
                    for b in snap.batches[name]
                ]
                if name in snap.batches
                else UNSET,
            )
        )
    nvml = next((s for s in snap.statuses if s.collector == "nvml"), None)
    gpu_available = nvml is not None and nvml.state == "running"
    gpu_available = gpu_available or snap.torch.gpu is not None or snap.torch.allocator is not None
    gpu_available = gpu_available or snap.nvml is not None
    reason = None if gpu_available else (nvml.message if nvml else "no GPU readings were collected")
    return Report(
        infertop_report=REPORT_VERSION,
        # start_time: the wall-clock time of the first event, to place an incident against
        # other clocks
        source=Source(source_kind, path, _r(snap.t_first, 6) if snap.t_first else None),
        target=Target(snap.target.pid, snap.target.cmdline, snap.target.python, snap.target.torch),
        duration_s=_r(snap.duration_s, 3),
        stages=stages,
        idle=idle,
        sampling=Sampling(
            rate_hz=snap.rate_hz,
            samples=snap.samples,
            windows=snap.windows,
            errors=snap.errors,
            coverage=_r(snap.coverage, 4),
            # no "wall": no wall windows (a recording older than format 1.5): share is cpu_share
            views=["wall", "cpu"] if snap.wall_measured else ["cpu"],
            notes=_sampling_notes(snap) or UNSET,
        ),
        top_frames=[
            TopFrame(t.frame.function, t.frame.file, t.frame.line, t.stage, _r(t.self_share),
                     _r(t.total_share))
            for t in snap.top
        ],  # fmt: skip
        ops=_ops(snap),
        profiler=Profiler(snap.torch.windows, _r(snap.torch.seconds, 3), snap.torch.truncated),
        gpu=_gpu(snap, gpu_available, reason),
        gc=gc_record(snap.pauses.gc if snap.pauses else None),
        event_loop=loop_record(snap.pauses.event_loop if snap.pauses else None),
        requests=requests_record(snap.requests),
        generation=generation_record(snap.generation),
        memory=memory_dict(
            snap.host_memory,
            snap.torch.memory,
            memory_summary(snap.nvml.readings if snap.nvml is not None else (), snap.torch.allocator),
        ),
        engine=engine_dict(snap.engine),
        findings=[finding_record(f) for f in evaluate(snapshot_input(snap), thresholds)],
        target_exited=snap.exited is not None,
        warnings=list(snap.notes),
    )


def _ops(snap: Snapshot) -> list[Op]:
    return [
        Op(o.name, o.device, o.count, _r(o.total_us, 3), _r(o.self_us, 3), stage=o.stage,
           mean_us=_r(o.mean_us, 3), shapes=o.shapes)
        for o in snap.torch.ops[:TOP_OPS]
    ]  # fmt: skip


def _gpu(snap: Snapshot, available: bool, reason: str | None) -> Gpu:
    """Kernel time, busy share and copies from the op windows; memory from the allocator and
    NVML; NVML's utilisation series summarised per device."""
    g, mem, nv = snap.torch.gpu, snap.torch.allocator, snap.nvml
    readings = nv.readings if nv is not None else ()
    kinds = {"compute": 0.0, "memory": 0.0, "communication": 0.0}
    return Gpu(
        available=available,
        reason=reason,
        kernel_time_us={k: _r(v, 3) for k, v in (g.kernel_time_us if g else kinds).items()},
        busy_share=None if g is None or g.busy_share is None else _r(g.busy_share),
        max_gap_us=None if g is None or not g.span_us else _r(g.max_gap_us, 3),
        memcpy=memcpy_records(g.memcpy if g else ()),
        syncs=sync_records(g.syncs if g else ()),
        # the allocator's numbers beside NVML's for the same device (docs/recording-format.md)
        memory=memory_summary(readings, mem),
        utilization=utilization_summary(readings) if readings else None,
        nvml_interval_s=None if nv is None or nv.interval_s is None else _r(nv.interval_s, 3),
    )


def _sampling_notes(snap: Snapshot) -> list[str]:
    """Why ``errors`` is what it is, and what the collectors said along the way."""
    notes = []
    if snap.errors:
        notes.append(
            f"{snap.errors} {plural(snap.errors, 'sample')} dropped: py-spy read a thread whose "
            "stack changed under it (wall windows read without stopping the target), or wrote a "
            "line it could not parse"
        )
    return notes + list(snap.status_notes)
