"""The report's ``engine`` section: an LLM engine's steps (analysis/engine.py)."""

from __future__ import annotations

from typing import Any

from infertop.analysis.engine import EngineSummary


def _r(x: float, nd: int = 3) -> float:
    return round(x, nd)


def engine_dict(e: EngineSummary | None) -> dict[str, Any] | None:
    """None where no engine was followed. ``running``: the requests each step gave an output.
    What the agent does not read of the engine yet (the requests waiting, the tokens per step,
    the KV cache) is null."""
    if e is None:
        return None
    worker_total = sum(n for s, n in e.worker if s != "infertop")
    return {
        "kind": e.kind,
        "steps": e.steps,
        "steps_per_s": _r(e.steps_per_s, 2),
        "step_ms": None if e.step_ms is None else {"p50": _r(e.step_ms[0]), "p99": _r(e.step_ms[1])},
        "step_breakdown_ms": {s: _r(ms) for s, ms in e.breakdown_ms().items()},
        # the model worker's busy time by stage (its spin for the next step left out)
        "worker_shares": {s: _r(n / worker_total, 4) for s, n in e.worker if s != "infertop"}
        if worker_total
        else {},
        "outside_forward_share": None if e.outside_forward is None else _r(e.outside_forward, 4),
        "running": None if e.running is None else {"p50": _r(e.running[0], 1), "max": e.running[1]},
        "waiting": None,
        "prefill_tokens_per_step": None,
        "decode_tokens_per_step": None,
        "kv_cache": None,
    }
