"""What ``diff`` compares, read the same way from a recording or a torch.profiler trace.

- latencies: per-call durations (ms) by name: stage calls (``stage NAME``) and annotation
  ranges (``ProfilerStep#N`` becomes ``ProfilerStep#*``, any ``#digits`` likewise);
- stage shares (recordings: py-spy samples), of wall time when both recordings have it, else
  of CPU time (a recording older than format 1.5 has CPU windows only);
- time per step of every op and kernel (µs), and GPU time per step: over the profiled time
  divided by the number of ``ProfilerStep#N`` ranges in it, or per profiled second when there
  are none (``per`` says which);
- the hottest Python frames (self share of samples), and the findings;
- host memory (recordings from format 1.8): the peak RSS of all processes (each one's peak,
  summed) and the growth past warm-up of the fastest-growing one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import numpy as np

from infertop.analysis.findings import evaluate
from infertop.analysis.findings.trace import trace_input
from infertop.analysis.flame import FlameNode
from infertop.analysis.trace_ops import op_table
from infertop.compare.pprof_profile import summarize_pprof
from infertop.config import Config
from infertop.errors import UsageError
from infertop.record.reader import read_recording
from infertop.report.recording import recording_report
from infertop.report.records import Finding as FindingRecord
from infertop.report.records import finding_record
from infertop.trace.files import is_trace_path
from infertop.trace.gpu import summarize_gpu
from infertop.trace.table import CAT, GPU_CATS, read_trace

#: files ``diff`` reads as pprof profiles (``export --format pprof``, or a backend's)
PPROF_SUFFIXES = (".pb.gz", ".pb", ".pprof")
STEP_RE = re.compile(r"^ProfilerStep#\d+$")
NUMBERED = re.compile(r"#\d+$")


def group_name(name: str) -> str:
    return NUMBERED.sub("#*", name)


@dataclass
class Profile:
    kind: str  # "recording" | "kineto" | "pprof"
    path: str
    seconds: float  # profiled wall time the per-second figures divide by
    steps: int  # ProfilerStep ranges seen
    latencies: dict[str, list[float]] = field(default_factory=dict)  # ms per call
    stage_shares: dict[str, float] = field(default_factory=dict)
    stage_rates: dict[str, float] = field(default_factory=dict)  # busy thread-s per wall s
    #: the same of the CPU view; ``stage_shares`` are wall shares when ``wall`` (a recording
    #: with wall windows, format 1.5), else CPU shares
    cpu_shares: dict[str, float] = field(default_factory=dict)
    wall: bool = False
    frames: dict[str, float] = field(default_factory=dict)  # "func (file:line)" -> self share
    ops: dict[str, float] = field(default_factory=dict)  # CPU op -> self µs (whole profile)
    kernels: dict[str, float] = field(default_factory=dict)  # kernel/copy -> µs
    gpu_us: float = 0.0  # device time (kernels, copies, memsets)
    findings: dict[str, FindingRecord] = field(default_factory=dict)  # rule -> finding
    warning: str | None = None
    flame: FlameNode | None = None  # the Python call tree (plumbing folded); None: a trace
    #: host memory: each process's peak RSS summed (bytes), the fastest growth past warm-up
    #: (bytes/s); None: not read (a trace, a recording before format 1.8, too short to say)
    memory_peak: float | None = None
    memory_growth: float | None = None
    #: the largest peak of a forward call torch's allocator reported (bytes; --profile-memory);
    #: None: no forward call profiled so
    torch_peak: float | None = None


def load_profile(path: str, config: Config | None = None) -> Profile:
    cfg = config or Config()
    if is_trace_path(path):
        return _from_trace(path, cfg)
    if path.endswith(PPROF_SUFFIXES):
        return _from_pprof(path)
    return _from_recording(path, cfg)


def _from_recording(path: str, cfg: Config) -> Profile:
    rec = read_recording(path)
    made = recording_report(rec, cfg, path=path, processes=False)
    rep, s, snap = made.record, made.source.session, made.snapshot
    prof = Profile("recording", path, snap.torch.seconds, 0, warning=rec.warning, flame=snap.flame)
    for sp in s.spans:
        prof.latencies.setdefault(f"stage {sp.stage}", []).append((sp.t_end - sp.t_start) * 1000)
    seen: set[tuple[str, int, float]] = set()
    for w in s.op_windows:
        for a in w.annotations:
            key = (a.name, a.tid, a.t_start)
            if key in seen or a.t_end < a.t_start:
                continue
            seen.add(key)
            prof.latencies.setdefault(group_name(a.name), []).append((a.t_end - a.t_start) * 1000)
            if STEP_RE.match(a.name):
                prof.steps += 1
    prof.wall = "wall" in rep.sampling.views
    prof.stage_shares = {st.name: st.share for st in rep.stages if st.samples}
    prof.cpu_shares = {st.name: st.cpu_share for st in rep.stages if st.cpu_samples}
    if rep.duration_s > 0:
        prof.stage_rates = {st.name: st.seconds / rep.duration_s for st in rep.stages if st.samples}
    for f in rep.top_frames:
        label = f"{f.function} ({_short(f.file)}:{f.line})"
        prof.frames[label] = prof.frames.get(label, 0.0) + f.self_share
    for o in snap.torch.ops:
        if o.device == "cpu":
            prof.ops[o.name] = prof.ops.get(o.name, 0.0) + o.self_us
    if snap.torch.gpu is not None:
        for k in snap.torch.gpu.kernels:
            prof.kernels[k.name] = prof.kernels.get(k.name, 0.0) + k.total_us
        prof.gpu_us = float(sum(snap.torch.gpu.kernel_time_us.values()))
    prof.findings = {f.rule: f for f in rep.findings}
    if rep.memory is not None and rep.memory["processes"]:
        prof.memory_peak = float(sum(p["rss_bytes"]["max"] for p in rep.memory["processes"]))
        growth = rep.memory.get("growth_bytes_per_s")
        prof.memory_growth = None if growth is None else float(growth)
    torch = rep.memory.get("torch") if rep.memory is not None else None
    if torch is not None and torch.get("peak_per_call_bytes") is not None:
        prof.torch_peak = float(torch["peak_per_call_bytes"])
    return prof


def _from_pprof(path: str) -> Profile:
    got = summarize_pprof(path)
    frames = {f"{name} ({_short(file)}:{line})": v for (name, file, line), v in got.frames.items()}
    prof = Profile("pprof", path, got.seconds, 0, frames=frames, ops=got.ops)
    prof.stage_shares, prof.cpu_shares = got.stage_shares, dict(got.stage_shares)
    prof.kernels, prof.gpu_us = got.kernels, sum(got.kernels.values())
    return prof


def _short(path: str) -> str:
    parts = path.replace("\\", "/").rsplit("/", 2)
    return "/".join(parts[-2:])


def _from_trace(path: str, cfg: Config) -> Profile:
    if os.path.isdir(path):
        raise UsageError(
            f"{path} is a directory: diff one trace against one trace",
            "pick the same rank from both runs",
        )
    t = read_trace(path)
    wall = float((t.ts + t.dur).max() - t.ts.min()) / 1e6 if len(t) else 0.0
    prof = Profile("kineto", path, wall, 0)
    ann = np.flatnonzero(
        np.isin(t.cat, [CAT["user_annotation"], CAT["gpu_user_annotation"]]) & (t.dur >= 0)
    )
    for i in ann.tolist():
        name = t.names[int(t.name[i])]
        if t.cat[i] == CAT["gpu_user_annotation"]:
            name = f"GPU {name}"
        prof.latencies.setdefault(group_name(name), []).append(float(t.dur[i]) / 1000)
        if t.cat[i] == CAT["user_annotation"] and STEP_RE.match(name):
            prof.steps += 1
    for r in op_table(t):
        if r.device == "cpu":
            prof.ops[r.name] = prof.ops.get(r.name, 0.0) + r.self_us
        else:
            prof.kernels[r.name] = prof.kernels.get(r.name, 0.0) + r.total_us
    prof.gpu_us = float(t.dur[np.isin(t.cat, GPU_CATS)].sum())
    gsum = summarize_gpu(t)
    prof.findings = {f.rule: finding_record(f) for f in evaluate(trace_input(t, gsum), cfg.findings)}
    if t.skipped:
        prof.warning = f"{path}: {t.skipped} malformed events skipped"
    return prof
