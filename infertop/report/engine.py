"""The report's ``engine`` section: an LLM engine's steps (analysis/engine.py)."""

from __future__ import annotations

from typing import Any

from infertop.analysis.engine import EngineSummary


def _r(x: float, nd: int = 3) -> float:
    return round(x, nd)


def _per_s(n: int, seconds: float) -> float | None:
    return _r(n / seconds, 1) if seconds > 0 else None


def engine_dict(e: EngineSummary | None) -> dict[str, Any] | None:
    """None where no engine was followed. ``running``: the requests running after each step,
    as the engine's scheduler counted them where the agent read its metrics, else the requests
    each step gave an output. The scheduler's fields (the requests waiting, the tokens per
    step, the KV cache) are null where its metrics were not read."""
    if e is None:
        return None
    worker_total = sum(n for s, n in e.worker if s != "infertop")
    sc = e.scheduler
    running = e.running if sc is None else sc.running
    # the token rates over the steps read (the agent in the API process starts after the
    # recording does), else over the recording
    secs = sc.seconds if sc is not None and sc.seconds >= 1.0 else e.duration_s
    means = sc.time_means if sc is not None else None
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
        "running": None if running is None else {"p50": _r(running[0], 1), "max": running[1]},
        "waiting": None if sc is None else {"p50": _r(sc.waiting[0], 1), "max": sc.waiting[1]},
        # each step's state holding until the next step's: the means a scrape of the engine's
        # gauges sees (idle time between steps in them), beside the steps' own p50 above
        "time_means": None
        if means is None
        else {"running": _r(means[0], 3), "waiting": _r(means[1], 3), "kv_usage": _r(means[2], 5)},
        "prefill_tokens_per_step": None if sc is None else _r(sc.prompt_tokens / sc.steps, 2),
        "decode_tokens_per_step": None if sc is None else _r(sc.generation_tokens / sc.steps, 2),
        "kv_cache": None
        if sc is None
        else {
            "usage_p50": _r(sc.kv_usage[0], 4),
            "usage_max": _r(sc.kv_usage[1], 4),
            "preemptions": sc.preemptions,
            "prefix_hit_rate": None if sc.prefix_hit_rate is None else _r(sc.prefix_hit_rate, 4),
        },
        # added 2026-12-07: the scheduler's own counts (null where its metrics were not read)
        "scheduler_steps": None if sc is None else sc.steps,
        "preemptions": None if sc is None else sc.preemptions,
        "prompt_tokens_per_s": None if sc is None else _per_s(sc.prompt_tokens, secs),
        "generation_tokens_per_s": None if sc is None else _per_s(sc.generation_tokens, secs),
    }


def engine_lines(rep: dict[str, Any]) -> list[str]:
    """The text report's lines (from the report's JSON): steps, and the scheduler's state."""
    e = rep.get("engine")
    if not e:
        return []
    head = f"engine ({e['kind']}): {e['steps']} steps timed, {e['steps_per_s']:.1f}/s"
    if e.get("step_ms"):
        head += f", step p50 {e['step_ms']['p50']:.2f} p99 {e['step_ms']['p99']:.2f} ms"
    if e.get("outside_forward_share") is not None:
        head += f", {100 * e['outside_forward_share']:.0f}% of the worker's busy time outside the forward"
    lines = [head]
    run, wait = e.get("running"), e.get("waiting")
    if run and wait:
        lines.append(
            f"  scheduler ({e.get('scheduler_steps')} steps): running p50 {run['p50']:g} max {run['max']},"
            f" waiting p50 {wait['p50']:g} max {wait['max']}; per step {e['prefill_tokens_per_step']:g} prompt"
            f" + {e['decode_tokens_per_step']:g} generated tokens"
        )
        if (m := e.get("time_means")) is not None:
            lines.append(
                f"  over time (as vLLM's gauges): running {m['running']:.2f}, waiting {m['waiting']:.2f},"
                f" KV cache {100 * m['kv_usage']:.1f}% on average"
            )
    elif run:
        lines.append(f"  requests per step (its outputs): p50 {run['p50']:g} max {run['max']}")
    kv = e.get("kv_cache")
    if kv:
        line = (
            f"  KV cache: usage p50 {100 * kv['usage_p50']:.0f}% max {100 * kv['usage_max']:.1f}%,"
            f" {kv['preemptions']} preemptions"
        )
        if kv.get("prefix_hit_rate") is not None:
            line += f", prefix cache hits {100 * kv['prefix_hit_rate']:.0f}%"
        lines.append(line)
    if e.get("prompt_tokens_per_s") is not None:
        lines.append(
            f"  tokens: {e['prompt_tokens_per_s']:g} prompt/s, {e['generation_tokens_per_s']:g} generated/s"
        )
    return lines + [""]
