"""The agent's generation calls against a service's own timing of them (its rows: ``t`` (unix
s), ``ttft_ms``, ``total_ms``, ``tpot_ms``, ``batch``, ``kv_bytes``), as the issue's bar asks:
TTFT and TPOT p50 within 15 %, the batch sizes' p50 and max exact, the KV cache's largest within
10 %. For the 3.12 truth tests (the text-generation sample, a LitServe worker)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import pytest

from infertop.model.events import GenerationCall


def own_calls_beside(calls: Sequence[GenerationCall], own: Sequence[dict]) -> list[dict]:
    """The service's rows of the calls the agent saw: those within its first call's start and
    its last call's end (the agent starts timing a few seconds into a recording)."""
    t0, t1 = min(c.t_start for c in calls), max(c.t_end for c in calls)
    mine = [c for c in own if t0 - 0.005 <= c["t"] and c["t"] + c["total_ms"] / 1000 <= t1 + 0.005]
    assert abs(len(mine) - len(calls)) <= 1, (len(mine), len(calls))
    return mine


def check_against_own(
    label: str, g: dict, calls: Sequence[GenerationCall], own: Sequence[dict]
) -> list[dict]:
    """The report's ``generation`` against the service's rows over the same calls; those rows."""
    mine = own_calls_beside(calls, own)

    def p50(key: str) -> float:
        return statistics.median(c[key] for c in mine if c[key] is not None)

    print(f"{label}: TTFT p50 {g['ttft_ms']['p50']:.2f} (own {p50('ttft_ms'):.2f}) ms, TPOT p50 "
          f"{g['tpot_ms']['p50']:.3f} (own {p50('tpot_ms'):.3f}) ms, {len(calls)} calls")  # fmt: skip
    assert g["ttft_ms"]["p50"] == pytest.approx(p50("ttft_ms"), rel=0.15)
    assert g["tpot_ms"]["p50"] == pytest.approx(p50("tpot_ms"), rel=0.15)
    assert g["batch_size"]["p50"] == p50("batch") and g["batch_size"]["max"] == max(
        c["batch"] for c in mine
    )
    assert g["kv_cache"]["bytes_max"] == pytest.approx(max(c["kv_bytes"] for c in mine), rel=0.10)
    return mine
