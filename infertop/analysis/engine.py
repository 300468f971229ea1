"""An LLM engine's steps (vLLM's v1 engine; SGLang's scheduler named, not yet timed): how
many a second and how long, from the agent's timings of the engine's step (stage ``step``:
``stages.KNOWN_ENTRY_POINTS``, only steps that ran the model), where a step's time goes, from
the samples of its engine core and of its model worker (docs/stages.md, "LLM engines"), and
its scheduler's state step by step as the engine's own metrics saw it (requests running and
waiting, KV-cache usage, preemptions, tokens: ``model/engine.py``). Pure functions over a
``Session``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infertop.analysis.processes.roles import ENGINE_SCHEDULERS
from infertop.analysis.processes.shares import process_shares
from infertop.analysis.session import Session
from infertop.analysis.shares import percentile
from infertop.model.engine import EngineStats, Histogram
from infertop.model.events import StageSpan

#: the agent's stage for one engine step
STEP = "step"
#: the model worker's role (``vllm model worker``, ``vllm model worker tp1``)
WORKERS = ("vllm model worker",)
#: stages of the worker's busy time that are not the engine's work: infertop's own
NOT_THE_ENGINE = ("infertop",)


@dataclass(frozen=True)
class SchedulerSummary:
    """The engine's scheduler over its steps whose metrics the agent read (vLLM's
    ``SchedulerStats`` and ``IterationStats``, every engine summed)."""

    steps: int
    running: tuple[float, int]  # requests running after a step: (p50, max)
    waiting: tuple[float, int]  # requests waiting: (p50, max)
    kv_usage: tuple[float, float]  # the KV cache's usage, 0-1: (p50, to whole percent; max)
    preemptions: int
    prompt_tokens: int  # of the requests whose prefill finished
    generation_tokens: int
    prefix_queries: int
    prefix_hits: int
    #: the first step read to the last one's (unix s): the token rates' seconds
    seconds: float = 0.0
    #: means over time, each step's state holding until the next's (what a scrape of vLLM's
    #: gauges sees on average): running, waiting, usage; None without two steps
    time_means: tuple[float, float, float] | None = None

    @property
    def prefix_hit_rate(self) -> float | None:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else None


def _hist_p50_max(h: dict[int, int]) -> tuple[float, int]:
    """The median (of the steps, the lower middle value) and the largest value seen."""
    total = sum(h.values())
    keys = sorted(h)
    seen = 0
    for v in keys:
        seen += h[v]
        if 2 * seen >= total:
            return float(v), keys[-1]
    return 0.0, 0


def scheduler_summary(stats: Sequence[EngineStats], t: float | None = None) -> SchedulerSummary | None:
    """The windows that ended by ``t`` (None: all) summed; None without a step read."""
    hists: tuple[dict[int, int], dict[int, int], dict[int, int]] = ({}, {}, {})
    steps = pre = prompt = gen = pq = ph = 0
    kv_max = held = run_s = wait_s = kv_s = 0.0
    first, last = float("inf"), float("-inf")
    for s in stats:
        if t is not None and s.t_end > t:
            continue
        steps += s.steps
        first, last = min(first, s.t_start), max(last, s.t_end)
        held, run_s, wait_s, kv_s = held + s.held_s, run_s + s.running_s, wait_s + s.waiting_s, kv_s + s.kv_usage_s
        pre, prompt, gen = pre + s.preempted, prompt + s.prompt_tokens, gen + s.generation_tokens
        pq, ph = pq + s.prefix_queries, ph + s.prefix_hits
        kv_max = max(kv_max, s.kv_usage_max)
        h: Histogram
        for acc, h in zip(hists, (s.running, s.waiting, s.kv_usage)):
            for v, n in h:
                acc[v] = acc.get(v, 0) + n
    if not steps:
        return None
    kv_p50 = _hist_p50_max(hists[2])[0] / 100.0
    return SchedulerSummary(
        steps, _hist_p50_max(hists[0]), _hist_p50_max(hists[1]), (kv_p50, kv_max), pre, prompt,
        gen, pq, ph, last - first, (run_s / held, wait_s / held, kv_s / held) if held > 0 else None,
    )  # fmt: skip


@dataclass(frozen=True)
class EngineSummary:
    kind: str  # "vllm" or "sglang"
    steps: int  # steps timed that ran the model
    steps_per_s: float
    step_ms: tuple[float, float, float] | None  # (p50, p99, mean); None: no step timed
    #: the requests a step gave an output (its batch: prefills and decodes), (p50, max); None:
    #: no step told it
    running: tuple[float, int] | None
    #: the engine core's active samples by stage: its view of a step (``forward`` there is its
    #: wait for the worker)
    core: tuple[tuple[str, int], ...]
    #: the model worker's active samples by stage, its spin for the next step left out
    worker: tuple[tuple[str, int], ...]
    #: the scheduler's state as the engine's own metrics saw it; None: not read (no agent in
    #: the API process, or vLLM started with --disable-log-stats)
    scheduler: SchedulerSummary | None = None
    duration_s: float = 0.0  # the session's, for the token rates

    @property
    def outside_forward(self) -> float | None:
        """The model worker's busy time outside the model's forward (preparing the inputs,
        sampling, its hops), of all of it; None without its samples. A lower bound of the
        step's time outside the forward: the worker's wait while the engine core schedules is
        not in it."""
        busy = {s: n for s, n in self.worker if s not in NOT_THE_ENGINE}
        total = sum(busy.values())
        return 1.0 - busy.get("forward", 0) / total if total else None

    def breakdown_ms(self) -> dict[str, float]:
        """The mean step's milliseconds by stage, as the engine core saw it; empty without
        timed steps or its samples."""
        total = sum(n for s, n in self.core if s not in NOT_THE_ENGINE)
        if self.step_ms is None or not total:
            return {}
        mean = self.step_ms[2]
        return {s: mean * n / total for s, n in self.core if s not in NOT_THE_ENGINE}


def engine_of(labels: Sequence[tuple[int, str]], process: int | None) -> bool:
    """Whether a snapshot of the whole session (``process`` None) or of one of its processes
    has an engine to summarize: the session's where an engine is among its processes, and of
    its processes only the model worker's (its step is where engine-step-overhead points)."""
    if engine_kind(labels) is None:
        return False
    return process is None or dict(labels).get(process, "").startswith(WORKERS)


def engine_kind(labels: Sequence[tuple[int, str]]) -> str | None:
    """"vllm" or "sglang" where one of the processes is an engine's scheduler; else None."""
    for _pid, role in labels:
        if role.startswith(ENGINE_SCHEDULERS):
            return role.split(" ", 1)[0]
    return None


def engine_summary(
    session: Session, spans: Sequence[StageSpan], duration_s: float, t: float | None = None,
    labels: Sequence[tuple[int, str]] = (),
) -> EngineSummary | None:  # fmt: skip
    """The engine of a ``--children`` session (``labels``: its processes' (pid, role));
    None where none of them is an engine's scheduler."""
    kind = engine_kind(labels)
    if kind is None:
        return None
    timed = [sp for sp in spans if sp.stage == STEP]
    steps = sorted((sp.t_end - sp.t_start) * 1000.0 for sp in timed)
    step_ms = None
    if steps:
        step_ms = (percentile(steps, 50), percentile(steps, 99), sum(steps) / len(steps))
    batches = sorted(sp.batch for sp in timed if sp.batch)
    running = (percentile(batches, 50), batches[-1]) if batches else None
    core: tuple[tuple[str, int], ...] = ()
    worker: dict[str, int] = {}
    for p in process_shares(session, t):
        if p.role.startswith(ENGINE_SCHEDULERS) and not core:
            core = p.stages
        elif p.role.startswith(WORKERS):
            for stage, n in p.stages:
                worker[stage] = worker.get(stage, 0) + n
    return EngineSummary(
        kind,
        len(steps),
        len(steps) / duration_s if duration_s > 0 else 0.0,
        step_ms,
        running,
        core,
        tuple(sorted(worker.items(), key=lambda kv: (-kv[1], kv[0]))),
        scheduler_summary(session.engine_stats, t),
        duration_s,
    )
