"""An LLM engine's scheduler as its own metrics see it, read by the agent (vLLM's
``StatLoggerManager.record``: a known entry point of ``stages.py``, read, not timed) and summed
per engine until ``spans.py`` sends it as an ``engine`` message (docs/agent-protocol.md)."""

from __future__ import annotations

import threading
import time

#: vLLM's scheduler state read by ``_vllm_stats`` at each engine step's metrics, summed until
#: the agent sends it: {engine index: [first unix s, last unix s, steps, {running requests:
#: steps}, {waiting requests: steps}, {KV-cache usage in %: steps}, usage max (0-1), preempted
#: requests, prompt tokens, generation tokens, prefix-cache queries, prefix-cache hits, seconds
#: held, running request-seconds, waiting request-seconds, usage-seconds]}: each step's state
#: holds until the next step's (the seconds: means over time, as a scrape of vLLM's gauges sees)
ENGINE_STATS: dict[int, list] = {}
#: {engine index: (unix s, running, waiting, usage)} of its last step read
ENGINE_LAST: dict[int, tuple] = {}
ENGINE_STATS_LOCK = threading.Lock()


def _vllm_stats(frame):
    """vLLM's ``StatLoggerManager.record(scheduler_stats, iteration_stats, ..., engine_idx)``,
    called in its API process once per engine step's outputs: a few numbers added to its
    engine's sums; the call is not timed (None). Only the arguments' fields are read."""
    loc = frame.f_locals
    sched, it = loc.get("scheduler_stats"), loc.get("iteration_stats")
    if sched is None and it is None:
        return None
    idx = loc.get("engine_idx") or 0
    now = time.time()
    with ENGINE_STATS_LOCK:
        acc = ENGINE_STATS.get(idx)
        if acc is None:
            if len(ENGINE_STATS) >= 64 or type(idx) is not int:
                return None
            acc = ENGINE_STATS[idx] = [now, now, 0, {}, {}, {}, 0.0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0]
        acc[1] = now
        if sched is not None:
            acc[2] += 1
            run = int(sched.num_running_reqs)
            wait = int(sched.num_waiting_reqs) + int(getattr(sched, "num_skipped_waiting_reqs", 0) or 0)
            usage = float(sched.kv_cache_usage)
            last = ENGINE_LAST.get(idx)
            if last is not None and now > last[0]:
                dt = now - last[0]
                acc[12] += dt
                acc[13] += dt * last[1]
                acc[14] += dt * last[2]
                acc[15] += dt * last[3]
            ENGINE_LAST[idx] = (now, run, wait, usage)
            pct = int(usage * 100.0 + 0.5)
            for hist, key in ((acc[3], run), (acc[4], wait), (acc[5], pct)):
                hist[key] = hist.get(key, 0) + 1
            if usage > acc[6]:
                acc[6] = usage
            pc = getattr(sched, "prefix_cache_stats", None)
            if pc is not None:
                acc[10] += int(pc.queries)
                acc[11] += int(pc.hits)
        if it is not None:
            acc[7] += int(it.num_preempted_reqs)
            acc[8] += int(it.num_prompt_tokens)
            acc[9] += int(it.num_generation_tokens)
    return None


def take_engine_stats(last=False):
    """The sums since the last call, as the rows of an ``engine`` message; [] without any.
    ``last``: forget each engine's last step too (a session's end)."""
    with ENGINE_STATS_LOCK:
        taken = list(ENGINE_STATS.items())
        ENGINE_STATS.clear()
        if last:
            ENGINE_LAST.clear()
    return [
        {"engine": idx, "t_start": a[0], "t_end": a[1], "steps": a[2],
         "running": sorted(a[3].items()), "waiting": sorted(a[4].items()),
         "kv_usage": sorted(a[5].items()), "kv_usage_max": a[6], "preempted": a[7],
         "prompt_tokens": a[8], "generation_tokens": a[9], "prefix_queries": a[10],
         "prefix_hits": a[11], "held_s": a[12], "running_s": a[13], "waiting_s": a[14],
         "kv_usage_s": a[15]}
        for idx, a in taken
    ]  # fmt: skip
