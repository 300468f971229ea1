"""Generation calls summed up: time to first token (TTFT), time per output token (TPOT), tokens,
batch size, latency by batch size, the KV cache and the slowest calls explained (the agent's
``GenerationCall`` events; docs/generation.md, the report's ``generation``).

Pure: ``summarize_generations(calls, ...)`` reads the calls and answers a ``GenerationSummary``,
or None when there were none (``generation: null``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from infertop.analysis.shares import Latency, percentile
from infertop.model.events import GenerationCall, StageSpan

#: the slowest calls kept, with their parts
SLOWEST = 5
#: a part (prefill, decode, queue) explains a slow call when it took this much longer than the
#: typical call's
EXPLAINS = 1.5


@dataclass(frozen=True, slots=True)
class Spread:
    p50: float
    max: float
    mean: float


@dataclass(frozen=True, slots=True)
class BatchRow:
    """The calls of one batch size: how many, their latency and TTFT p50, per-token time."""

    batch: int
    calls: int
    latency_ms_p50: float
    ttft_ms_p50: float | None
    tpot_ms_p50: float | None


@dataclass(frozen=True, slots=True)
class KvCache:
    bytes_p50: int
    bytes_max: int
    #: of one sequence: a call's bytes / (batch x the positions it holds: prompt + new - 1)
    bytes_per_token: float | None
    device: str
    #: device memory left (its total less the most reserved or used), on CUDA; else None
    headroom_bytes: int | None
    #: what the largest batch seen at the longest sequence seen would hold (for the finding)
    worst_case_bytes: int | None


@dataclass(frozen=True, slots=True)
class SlowCall:
    t: float  # unix s
    duration_ms: float
    queue_ms: float | None  # a ``queue`` span that ended on its thread just before it
    prefill_ms: float | None
    decode_ms: float | None
    batch: int | None
    prompt_tokens: int | None
    new_tokens: int | None
    why: str  # "queue" | "prefill" | "decode" | "" (no part stands out)
    tid: int
    pid: int


@dataclass(frozen=True, slots=True)
class GenerationSummary:
    calls: int
    latency_ms: Latency
    ttft_ms: Latency | None
    tpot_ms: Latency | None
    tokens_per_s: float | None  # new tokens of every sequence / the calls' seconds
    new_tokens: Spread | None
    prompt_tokens: Spread | None
    batch_size: Spread | None
    by_batch: tuple[BatchRow, ...]
    kv_cache: KvCache | None
    slowest: tuple[SlowCall, ...]


def ttft_ms(c: GenerationCall) -> float | None:
    return None if c.t_first is None else (c.t_first - c.t_start) * 1000.0


def tpot_ms(c: GenerationCall) -> float | None:
    """(last token - first token) / (new tokens - 1): the call's end is its last token."""
    if c.t_first is None or c.new_tokens is None or c.new_tokens < 2:
        return None
    return (c.t_end - c.t_first) * 1000.0 / (c.new_tokens - 1)


def _lat(values: Iterable[float | None]) -> Latency | None:
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    return Latency(percentile(v, 50), percentile(v, 95), percentile(v, 99))


def _spread(values: Iterable[int | None]) -> Spread | None:
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    return Spread(percentile(v, 50), float(v[-1]), sum(v) / len(v))


def _p50(values: Iterable[float | None]) -> float | None:
    v = sorted(x for x in values if x is not None)
    return percentile(v, 50) if v else None


def _by_batch(calls: Sequence[GenerationCall]) -> tuple[BatchRow, ...]:
    groups: dict[int, list[GenerationCall]] = {}
    for c in calls:
        if c.batch is not None:
            groups.setdefault(c.batch, []).append(c)
    rows = []
    for batch in sorted(groups):
        group = groups[batch]
        rows.append(BatchRow(
            batch, len(group), _p50((c.t_end - c.t_start) * 1000.0 for c in group) or 0.0,
            _p50(ttft_ms(c) for c in group), _p50(tpot_ms(c) for c in group),
        ))  # fmt: skip
    return tuple(rows)


def _kv(calls: Sequence[GenerationCall], free_bytes: int | None) -> KvCache | None:
    held = [c for c in calls if c.kv_bytes is not None and c.kv_device]
    if not held:
        return None
    sizes = sorted(c.kv_bytes or 0 for c in held)
    per_token = [  # the positions a cache holds at the end: the last token was never fed
        (c.kv_bytes or 0) / (c.batch * (c.prompt_tokens + c.new_tokens - 1))
        for c in held
        if c.batch and c.prompt_tokens is not None and c.new_tokens is not None
        and c.prompt_tokens + c.new_tokens > 1
    ]  # fmt: skip
    device = max(held, key=lambda c: c.kv_bytes or 0).kv_device or "?"
    bpt = percentile(sorted(per_token), 50) if per_token else None
    worst = None
    lengths = [
        c.prompt_tokens + c.new_tokens
        for c in held
        if c.prompt_tokens is not None and c.new_tokens is not None
    ]
    batches = [c.batch for c in held if c.batch]
    if bpt is not None and lengths and batches:
        worst = int(bpt * max(batches) * max(lengths))
    headroom = free_bytes if device.startswith("cuda") else None
    return KvCache(int(percentile(sizes, 50)), sizes[-1], bpt, device, headroom, worst)


def _queue_index(spans: Sequence[StageSpan]) -> dict[int, tuple[list[float], list[float]]]:
    """The ``queue`` spans' ends and durations (ms) by thread, in order of end."""
    rows: dict[int, list[tuple[float, float]]] = {}
    for sp in spans:
        if sp.stage == "queue":
            rows.setdefault(sp.tid, []).append((sp.t_end, (sp.t_end - sp.t_start) * 1000.0))
    out = {}
    for tid, r in rows.items():
        r.sort()
        out[tid] = ([e for e, _ in r], [d for _, d in r])
    return out


def _queue_before(
    c: GenerationCall, index: dict[int, tuple[list[float], list[float]]]
) -> float | None:
    """The ``queue`` span on the call's thread that ended within 1 ms before it started."""
    got = index.get(c.tid)
    if got is None:
        return None
    ends, ms = got
    i = bisect.bisect_right(ends, c.t_start + 1e-6) - 1
    return ms[i] if i >= 0 and ends[i] >= c.t_start - 0.001 else None


def _slowest(calls: Sequence[GenerationCall], spans: Sequence[StageSpan]) -> tuple[SlowCall, ...]:
    queues = _queue_index(spans)
    typical_pre = _p50(ttft_ms(c) for c in calls)
    typical_dec = _p50(None if c.t_first is None else (c.t_end - c.t_first) * 1000.0 for c in calls)
    typical_q = _p50(_queue_before(c, queues) for c in calls) if queues else None
    out = []
    for c in sorted(calls, key=lambda c: c.t_end - c.t_start, reverse=True)[:SLOWEST]:
        pre = ttft_ms(c)
        dec = None if c.t_first is None else (c.t_end - c.t_first) * 1000.0
        q = _queue_before(c, queues) if queues else None
        excess = {
            "queue": (q or 0.0) - (typical_q or 0.0) if q is not None else 0.0,
            "prefill": (pre - typical_pre) if pre is not None and typical_pre is not None else 0.0,
            "decode": (dec - typical_dec) if dec is not None and typical_dec is not None else 0.0,
        }
        typical = {"queue": typical_q, "prefill": typical_pre, "decode": typical_dec}
        part = max(excess, key=lambda k: excess[k])
        base = typical[part] or 0.0
        mine = {"queue": q, "prefill": pre, "decode": dec}[part] or 0.0
        why = part if excess[part] > 0 and mine >= EXPLAINS * base else ""
        out.append(SlowCall(
            c.t_start, (c.t_end - c.t_start) * 1000.0, q, pre, dec, c.batch, c.prompt_tokens,
            c.new_tokens, why, c.tid, c.pid,
        ))  # fmt: skip
    return tuple(out)


def summarize_generations(
    calls: Sequence[GenerationCall],
    spans: Sequence[StageSpan] = (),
    free_bytes: int | None = None,
) -> GenerationSummary | None:
    """The calls summed up; None when there are none. ``spans``: the session's stage spans (a
    slow call's queue wait); ``free_bytes``: the device memory left, for the cache's headroom."""
    if not calls:
        return None
    seconds = sum(c.t_end - c.t_start for c in calls)
    tokens = sum((c.new_tokens or 0) * (c.batch or 1) for c in calls if c.new_tokens is not None)
    return GenerationSummary(
        calls=len(calls),
        latency_ms=_lat((c.t_end - c.t_start) * 1000.0 for c in calls) or Latency(0.0, 0.0, 0.0),
        ttft_ms=_lat(ttft_ms(c) for c in calls),
        tpot_ms=_lat(tpot_ms(c) for c in calls),
        tokens_per_s=tokens / seconds if seconds > 0 and tokens else None,
        new_tokens=_spread(c.new_tokens for c in calls),
        prompt_tokens=_spread(c.prompt_tokens for c in calls),
        batch_size=_spread(c.batch for c in calls),
        by_batch=_by_batch(calls),
        kv_cache=_kv(calls, free_bytes),
        slowest=_slowest(calls, spans),
    )
