"""Stage shares of active time, and per-call latency percentiles from spans."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from infertop.analysis.stages import IDLE
from infertop.config import STAGES
from infertop.model.events import StageSpan


@dataclass(frozen=True, slots=True)
class Latency:
    p50: float
    p95: float
    p99: float


@dataclass(frozen=True, slots=True)
class StageShare:
    name: str
    share: float  # of active (non-idle) samples; idle's share is of all samples
    seconds: float  # thread-seconds (samples / rate)
    samples: int
    calls: int | None = None
    calls_per_s: float | None = None
    latency_ms: Latency | None = None


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted sequence (q in 0..100)."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def stage_shares(
    counts: dict[str, int],
    rate_hz: float,
    spans: Iterable[StageSpan] = (),
    duration_s: float = 0.0,
    durations_ms: dict[str, list[float]] | None = None,
    latencies: dict[str, tuple[int, Latency]] | None = None,
) -> list[StageShare]:
    """Shares in pipeline order (known stages first, then user stages by size). Call latencies
    come from ``spans``, or from ``durations_ms`` (ms by stage, as ``Session.span_durations``
    keeps them), or ready-made from ``latencies`` (calls and percentiles by stage, as
    ``Session.span_latencies`` gives them)."""
    active = sum(n for s, n in counts.items() if s != IDLE)
    everything = active + counts.get(IDLE, 0)
    by_stage: dict[str, list[float]] = {}
    made = latencies or {}
    if durations_ms is not None:  # read only: they are the session's own lists
        by_stage = {stage: ms for stage, ms in durations_ms.items() if ms}
    else:
        for sp in spans:
            by_stage.setdefault(sp.stage, []).append((sp.t_end - sp.t_start) * 1000.0)
    called = set(by_stage) | set(made)
    names = [s for s in STAGES if counts.get(s) or s in called]
    names += sorted(
        (s for s in set(counts) | called if s not in STAGES and (counts.get(s) or s in called)),
        key=lambda s: -counts.get(s, 0),
    )
    out = []
    for name in names:
        n = counts.get(name, 0)
        denom = everything if name == IDLE else active
        latency: Latency | None
        if name in made:
            n_calls, latency = made[name]
        else:
            durations = sorted(by_stage.get(name, ()))
            n_calls = len(durations)
            latency = (
                Latency(percentile(durations, 50), percentile(durations, 95), percentile(durations, 99))
                if durations
                else None
            )
        out.append(
            StageShare(
                name=name,
                share=n / denom if denom else 0.0,
                seconds=n / rate_hz if rate_hz else 0.0,
                samples=n,
                calls=n_calls if n_calls else None,
                calls_per_s=(n_calls / duration_s) if n_calls and duration_s > 0 else None,
                latency_ms=latency,
            )
        )
    return out
