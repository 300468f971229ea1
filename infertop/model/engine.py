"""An LLM engine's scheduler state, as its own metrics saw it step by step, summed over a short
window by the agent (docs/agent-protocol.md, ``engine``; recording code 24): vLLM's
``SchedulerStats`` and ``IterationStats`` where its API process records them.

The distributions are kept as histograms (value, steps), so that windows sum without loss:
``merged`` joins two windows of one engine into one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from infertop.model.numbers import real, whole

#: (value, steps): how many steps saw each value
Histogram = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class EngineStats:
    """The steps of engine ``engine`` whose metrics were recorded in [t_start, t_end] (unix s:
    the first and the last such step's)."""

    t_start: float
    t_end: float
    engine: int  # vLLM's engine index (data parallel: one per engine core)
    steps: int  # steps whose scheduler state was read
    running: Histogram  # requests running after the step (num_running_reqs)
    waiting: Histogram  # requests waiting (num_waiting_reqs + num_skipped_waiting_reqs)
    kv_usage: Histogram  # the KV cache's usage, in whole percent of its blocks
    kv_usage_max: float  # the largest usage seen, 0-1
    preempted: int  # requests preempted (their KV blocks taken back) in these steps
    prompt_tokens: int  # prompt tokens of the requests whose prefill finished in them
    generation_tokens: int  # tokens generated in them
    prefix_queries: int = 0  # prefix cache: tokens looked up
    prefix_hits: int = 0  # ... and found
    #: over time, each step's state holding until the next step's (a scrape of vLLM's gauges
    #: sees that): the seconds held in the window, and the running and waiting request-seconds
    #: and usage-seconds over them
    held_s: float = 0.0
    running_s: float = 0.0
    waiting_s: float = 0.0
    kv_usage_s: float = 0.0
    pid: int = 0  # the process (the API process's), as ``OpWindow.pid``


def _hist(rows: Iterable[Any]) -> Histogram:
    return tuple((whole(v), whole(n)) for v, n, *_ in rows)


def _sum(a: Histogram, b: Histogram) -> Histogram:
    out = dict(a)
    for v, n in b:
        out[v] = out.get(v, 0) + n
    return tuple(sorted(out.items()))


def merged(a: EngineStats, b: EngineStats) -> EngineStats:
    """Two windows of one engine as one (the session's older windows, thinned)."""
    return EngineStats(
        min(a.t_start, b.t_start), max(a.t_end, b.t_end), a.engine, a.steps + b.steps,
        _sum(a.running, b.running), _sum(a.waiting, b.waiting), _sum(a.kv_usage, b.kv_usage),
        max(a.kv_usage_max, b.kv_usage_max), a.preempted + b.preempted,
        a.prompt_tokens + b.prompt_tokens, a.generation_tokens + b.generation_tokens,
        a.prefix_queries + b.prefix_queries, a.prefix_hits + b.prefix_hits, a.held_s + b.held_s,
        a.running_s + b.running_s, a.waiting_s + b.waiting_s, a.kv_usage_s + b.kv_usage_s, a.pid,
    )  # fmt: skip


def engine_stats_from_wire(row: Mapping[str, Any]) -> EngineStats:
    """One row of the agent's ``engine`` message (by name; names it does not know ignored).
    Raises (ValueError, KeyError, TypeError) on a malformed row."""
    return EngineStats(
        real(row["t_start"]), real(row["t_end"]), whole(row["engine"]), whole(row["steps"]),
        _hist(row["running"]), _hist(row["waiting"]), _hist(row["kv_usage"]),
        real(row["kv_usage_max"]), whole(row["preempted"]), whole(row["prompt_tokens"]),
        whole(row["generation_tokens"]), whole(row.get("prefix_queries", 0)),
        whole(row.get("prefix_hits", 0)), real(row.get("held_s", 0.0)), real(row.get("running_s", 0.0)),
        real(row.get("waiting_s", 0.0)), real(row.get("kv_usage_s", 0.0)),
    )  # fmt: skip


def keep(stats: list[EngineStats], ev: EngineStats, limit: int) -> None:
    """Add ``ev`` to a session's list (in order of arrival); past ``limit`` its older half is
    thinned, each engine's windows merged two by two: totals and distributions stay exact, only
    their placing in time coarsens."""
    stats.append(ev)
    if len(stats) <= limit:
        return
    half = len(stats) // 2
    by: dict[tuple[int, int], list[EngineStats]] = {}
    for s in stats[:half]:
        by.setdefault((s.pid, s.engine), []).append(s)
    out = [
        merged(xs[i], xs[i + 1]) if i + 1 < len(xs) else xs[i]
        for xs in by.values()
        for i in range(0, len(xs), 2)
    ]
    stats[:half] = sorted(out, key=lambda s: s.t_end)
