"""The report document as typed records (docs/report.md, the spec's schema): what ``report
--format json`` writes and what ``diff`` reads back.

``Report`` is a recording's report (also a rank directory's, imported in memory), ``TraceReport``
one torch.profiler trace's. Their JSON is ``as_json(record)``: the fields in the order they are
declared, a field left ``UNSET`` absent (a section only some reports have: a trace's ``rank``, a
recording's ``incidents``). The sections are records too, built by their own modules (a stage's
``tail``, ``gc``, ``event_loop`` and ``requests`` by ``report/pauses.py``, ``generation`` by
``report/generation.py``); ``processes``, ``memory``, ``engine``, ``gpu.memory`` and
``gpu.utilization`` are still plain JSON values (``report/processes.py``, ``report/memory.py``,
``report/engine.py``, ``analysis/gpu_series.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType

from infertop.model import findings as model_findings
from infertop.model.events import SyncStat
from infertop.model.rows import MemcpyRow

Json = dict[str, Any]


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


class Source(Struct):
    kind: str  # "recording" | "kineto"
    path: str
    #: the wall-clock time (Unix s) of a recording's first event; absent in a trace's report
    start_time: float | None | UnsetType = UNSET


class Target(Struct):
    pid: int | None
    cmdline: str | None
    python: str | None
    torch: str | None


class Latency(Struct):
    p50: float
    p95: float
    p99: float


class P50P99(Struct):
    p50: float
    p99: float


# -- a stage's ``tail`` (report/pauses.py; docs/report.md, docs/stages.md "The tail") ---------
class TailSamples(Struct):
    slow: int
    typical: int


class TailFrame(Struct):
    """A frame more often in the slow calls' samples than in the typical calls'."""

    name: str
    file: str
    line: int
    slow_share: float
    typical_share: float


class TailStage(Struct):
    slow_share: float
    typical_share: float


class SlowSpan(Struct):
    t: float  # unix s
    duration_ms: float
    thread: int


class Tail(Struct):
    threshold_ms: float
    threshold: str  # "p99" | "given" (--slow)
    calls: int
    slow_calls: int
    typical_calls: int
    samples: TailSamples
    frames: list[TailFrame]
    #: shares of the slow calls' time that overlapped each (None: not measured)
    overlaps: dict[str, float | None]
    stages: dict[str, TailStage]
    slowest: list[SlowSpan]


# -- ``gc`` and ``event_loop`` (report/pauses.py) ---------------------------------------------
class GcGeneration(Struct):
    generation: int
    count: int
    total_ms: float
    p50_ms: float
    p99_ms: float
    max_ms: float


class Gc(Struct):
    #: collections: "total", then one key per generation seen ("0", "1", "2"; a full
    #: collection is "2")
    count: dict[str, int]
    total_s: float
    share: float
    collected: int
    max_ms: float
    long_pause_calls: float | None
    generations: list[GcGeneration]


class LagMs(Struct):
    p50: float
    p99: float
    max: float


class EventLoop(Struct):
    loops: int
    beats: int
    lag_ms: LagMs


# -- ``requests`` (report/pauses.py) ----------------------------------------------------------
class Route(Struct):
    route: str
    count: int
    latency_ms: Latency


class RequestStage(Struct):
    share: float
    slowest_share: float


class SlowRequest(Struct):
    id: str
    t: float  # unix s
    duration_ms: float
    stages: dict[str, float]  # ms of each stage in it


class Requests(Struct):
    count: int
    per_s: float | None
    latency_ms: Latency
    by_route: list[Route]
    stages: dict[str, RequestStage]
    joined: str  # "id" | "time" | "none"
    breakdown_ms: dict[str, P50P99]
    slowest: list[SlowRequest]


# -- ``generation`` (report/generation.py; docs/generation.md) --------------------------------
class Spread(Struct):
    p50: float
    max: float
    mean: float | UnsetType = UNSET  # batch sizes only


class KvCache(Struct):
    bytes_p50: int
    bytes_max: int
    bytes_per_token: float | None
    device: str
    headroom_bytes: int | None


class GenerationBatch(Struct):
    batch: int
    calls: int
    latency_ms_p50: float
    ttft_ms_p50: float | None
    tpot_ms_p50: float | None


class SlowGeneration(Struct):
    t: float  # unix s
    duration_ms: float
    queue_ms: float | None
    prefill_ms: float | None
    decode_ms: float | None
    batch: int | None
    prompt_tokens: int | None
    new_tokens: int | None
    why: str | None  # "queue" | "prefill" | "decode"; None: no part stands out


class Generation(Struct):
    calls: int
    ttft_ms: Latency | None
    tpot_ms: Latency | None
    tokens_per_s: float | None
    new_tokens: Spread | None
    prompt_tokens: Spread | None
    batch_size: Spread | None
    kv_cache: KvCache | None
    latency_ms: Latency | None
    by_batch: list[GenerationBatch]
    slowest: list[SlowGeneration]


class Stage(Struct):
    name: str
    share: float  # of wall time (the CPU view's when the recording has no wall windows)
    cpu_share: float
    seconds: float
    samples: int
    cpu_samples: int
    calls: int | None
    latency_ms: Latency | None
    tail: Tail | None
    #: the stage's calls by batch size, where the agent saw batch sizes (forward calls):
    #: [{"batch", "calls", "latency_ms_p50"}]; absent otherwise
    by_batch: list[Json] | UnsetType = UNSET


class Idle(Struct):
    share_of_all: float
    seconds: float
    samples: int


class Sampling(Struct):
    rate_hz: float
    samples: int  # active samples of the CPU windows
    windows: int  # py-spy windows, both kinds
    errors: int
    coverage: float
    views: list[str]  # ["wall", "cpu"], or ["cpu"]: no wall windows
    #: what the errors are, and what the collectors said along the way (a window that failed
    #: and why, windows lengthened on a busy host); absent when there is nothing to say
    notes: list[str] | UnsetType = UNSET


class TopFrame(Struct):
    function: str
    file: str
    line: int
    stage: str
    self_share: float
    total_share: float


class Op(Struct):
    name: str
    device: str
    count: int
    total_us: float
    self_us: float
    # a recording's ops only (the agent knows the stage, the mean and the input shapes)
    stage: str | None | UnsetType = UNSET
    mean_us: float | UnsetType = UNSET
    shapes: str | None | UnsetType = UNSET


class Profiler(Struct):
    windows: int
    seconds: float
    truncated: int


class Memcpy(Struct):
    kind: str
    host_memory: str
    count: int
    bytes: int
    total_us: float
    mean_gbps: float


class Sync(Struct):
    name: str
    count: int
    total_us: float


class Gpu(Struct):
    """A recording's ``gpu``: the agent's device work, the allocator and NVML."""

    available: bool
    reason: str | None
    kernel_time_us: dict[str, float]
    busy_share: float | None
    max_gap_us: float | None
    memcpy: list[Memcpy]
    syncs: list[Sync]
    memory: Json | None  # docs/report-gpu.md
    utilization: list[Json] | None
    nvml_interval_s: float | None


class TraceGpu(Struct):
    """A trace's ``gpu``: its device events (no allocator, no NVML)."""

    available: bool
    reason: str | None
    device_names: dict[str, str]
    kernel_time_us: dict[str, float]
    busy_share: float | None
    memcpy: list[Memcpy]
    memory: None
    sync_events: int  # Kineto's cuda_sync events
    syncs: list[Sync]
    launch_delay_us: dict[str, float] | None  # p50, p95


class Finding(Struct):
    rule: str
    severity: str
    title: str
    evidence: Json
    where: list[str]
    hint: str
    pid: int | None


class Incident(Struct):
    t: float
    at_s: float
    reason: str
    trigger: str | None


class Report(Struct):
    """A recording's report (``report FILE``; a rank directory's, with ``import_notes`` and
    ``ranks``)."""

    infertop_report: int
    source: Source
    target: Target
    duration_s: float
    stages: list[Stage]
    idle: Idle | None
    sampling: Sampling
    top_frames: list[TopFrame]
    ops: list[Op]
    profiler: Profiler
    gpu: Gpu
    gc: Gc | None
    event_loop: EventLoop | None
    requests: Requests | None
    generation: Generation | None  # the agent's generation calls (report/generation.py)
    memory: Json | None  # each process's host memory (report/memory.py); None: nothing read
    engine: Json | None  # an LLM engine's steps (report/engine.py); None: no engine followed
    findings: list[Finding]
    target_exited: bool
    warnings: list[str]
    #: a recording of several processes: one row each (None: one process); absent in the
    #: report ``diff`` builds, which compares the whole session
    processes: list[Json] | None | UnsetType = UNSET
    incidents: list[Incident] | UnsetType = UNSET  # watch's incident markers
    import_notes: list[str] | UnsetType = UNSET  # a rank directory: how it was imported
    ranks: list[TraceReport] | UnsetType = UNSET  # a rank directory: each trace's own report


class TraceReport(Struct):
    """One torch.profiler trace's report: no samples, so no stages or frames."""

    infertop_report: int
    source: Source
    target: Target
    rank: int | None
    duration_s: float
    stages: list[Stage]
    top_frames: list[TopFrame]
    ops: list[Op]
    gpu: TraceGpu
    findings: list[Finding]
    warnings: list[str]


class TraceDirReport(Struct):
    """A directory of traces read one by one (``build_trace_report`` of a directory)."""

    infertop_report: int
    source: Source
    ranks: list[TraceReport]


def as_json(record: Struct) -> Json:
    """The record (a report, or one of its sections) as JSON values (dicts, lists, numbers,
    strings), keys in schema order."""
    return msgspec.to_builtins(record)


def memcpy_records(rows: Iterable[MemcpyRow]) -> list[Memcpy]:
    return [
        Memcpy(m.kind, m.host_memory, m.count, m.bytes, _r(m.total_us, 3), _r(m.mean_gbps, 3))
        for m in rows
    ]


def sync_records(rows: Iterable[SyncStat]) -> list[Sync]:
    return [Sync(y.name, y.count, _r(y.total_us, 3)) for y in rows]


def finding_record(f: model_findings.Finding) -> Finding:
    """A finding of the rules as its record."""
    return Finding(f.rule, f.severity, f.title, f.evidence, list(f.where), f.hint, f.pid)
