"""An LLM engine's steps (vLLM's v1 engine; SGLang's scheduler named, not yet timed): how
many a second and how long, from the agent's timings of the engine's step (stage ``step``:
``stages.KNOWN_ENTRY_POINTS``, only steps that ran the model), and where a step's time goes,
from the samples of its engine core and of its model worker (docs/stages.md, "LLM engines").
Pure functions over a ``Session``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infertop.analysis.processes.roles import ENGINE_SCHEDULERS
from infertop.analysis.processes.shares import process_shares
from infertop.analysis.session import Session
from infertop.analysis.shares import percentile
from infertop.model.events import StageSpan

#: the agent's stage for one engine step
STEP = "step"
#: the model worker's role (``vllm model worker``, ``vllm model worker tp1``)
WORKERS = ("vllm model worker",)
#: stages of the worker's busy time that are not the engine's work: infertop's own
NOT_THE_ENGINE = ("infertop",)


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
    )
