"""Calls by batch size (the agent's batch sizes of forward calls: ``StageSpan.batch``): for each
stage that has them, how many calls of each size and their p50 latency, so that "a batch of 8
takes 1.5× a batch of 2, not 4×" reads at a glance (the report's ``stages[].by_batch``, the
stage panel's batch row)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from infertop.analysis.shares import percentile
from infertop.model.events import StageSpan


@dataclass(frozen=True, slots=True)
class BatchCalls:
    batch: int
    calls: int
    latency_ms_p50: float


def calls_by_batch(spans: Iterable[StageSpan]) -> dict[str, tuple[BatchCalls, ...]]:
    """{stage: its calls by batch size, smallest first} for the stages with batch sizes."""
    ms: dict[str, dict[int, list[float]]] = {}
    for sp in spans:
        if sp.batch is not None:
            ms.setdefault(sp.stage, {}).setdefault(sp.batch, []).append(
                (sp.t_end - sp.t_start) * 1000.0
            )
    return {
        stage: tuple(
            BatchCalls(b, len(v), percentile(sorted(v), 50)) for b, v in sorted(by.items())
        )
        for stage, by in ms.items()
    }
