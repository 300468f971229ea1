"""Recording code 24 (format 1.12): an LLM engine's scheduler state summed over a short window
(``model/engine.py``, docs/recording-format.md)."""

from __future__ import annotations

from typing import Any

from infertop.model.engine import EngineStats, Histogram
from infertop.model.numbers import real, whole

ENGINE_STATS = 24


def _flat(h: Histogram) -> list[int]:
    return [x for row in h for x in row]


def _rows(flat: Any) -> Histogram:
    if not isinstance(flat, list) or len(flat) % 2:
        raise ValueError("bad histogram")
    return tuple((whole(flat[i]), whole(flat[i + 1])) for i in range(0, len(flat), 2))


def encode_engine_stats(e: EngineStats) -> list[Any]:
    return [ENGINE_STATS, e.t_start, e.t_end, e.pid, e.engine, e.steps, _flat(e.running),
            _flat(e.waiting), _flat(e.kv_usage), e.kv_usage_max, e.preempted, e.prompt_tokens,
            e.generation_tokens, e.prefix_queries, e.prefix_hits, e.held_s, e.running_s, e.waiting_s,
            e.kv_usage_s]  # fmt: skip


def decode_engine_stats(f: list[Any]) -> EngineStats:
    return EngineStats(
        real(f[0]), real(f[1]), whole(f[3]), whole(f[4]), _rows(f[5]), _rows(f[6]), _rows(f[7]),
        real(f[8]), whole(f[9]), whole(f[10]), whole(f[11]), whole(f[12]), whole(f[13]),
        real(f[14]), real(f[15]), real(f[16]), real(f[17]), whole(f[2]),
    )  # fmt: skip
