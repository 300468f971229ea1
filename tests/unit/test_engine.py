"""An LLM engine's steps (analysis/engine.py, report ``engine``) and ``engine-step-overhead``,
on a session built from recording events: vLLM's three processes named by their titles, the
agent's ``step`` spans of the engine core, and the worker's samples."""

from __future__ import annotations

import pytest

from infertop.agent.payload.stages import _RETURN_FILTERS
from infertop.analysis.engine import engine_summary
from infertop.analysis.findings import RULES, FindingInput
from infertop.analysis.processes.view import process_labels
from infertop.analysis.session import Session
from infertop.config import FindingThresholds
from infertop.model.events import (
    Frame,
    FrameDef,
    ProcessDef,
    SampleWindow,
    StackDef,
    StageSpan,
    TargetInfo,
    ThreadDef,
)  # fmt: skip
from infertop.report.engine import engine_dict

SITE = "/venv/lib/python3.12/site-packages/vllm/"
STACKS = {  # the worker's main thread, innermost last
    "prepare": (SITE + "v1/worker/gpu_model_runner.py", "GPUModelRunner._prepare_inputs"),
    "forward": (SITE + "model_executor/models/llama.py", "LlamaForCausalLM.forward"),
    "sample": (SITE + "v1/sample/sampler.py", "Sampler.forward"),
    "schedule": (SITE + "v1/core/sched/scheduler.py", "Scheduler.schedule"),
}


def vllm_session(worker: dict[str, int], steps_ms: list[float]) -> Session:
    s = Session()
    s.apply(TargetInfo(10, "/venv/bin/python -m vllm.entrypoints.openai.api_server"))
    for i, (f, fn) in enumerate(STACKS.values()):
        s.apply(FrameDef(i, Frame(fn, f, 1)))
        s.apply(StackDef(i, (i,)))
    for pid, ppid, cmd in ((10, 0, "/venv/bin/python -m vllm.entrypoints.openai.api_server"),
                           (11, 10, "VLLM::EngineCore"), (12, 11, "VLLM::Worker")):  # fmt: skip
        s.apply(ProcessDef(pid, ppid, cmd))
        s.apply(ThreadDef(pid, "MainThread", pid))
    names = list(STACKS)
    counts = tuple((12, names.index(n), k) for n, k in worker.items()) + ((11, 3, 5),)
    s.apply(SampleWindow(0.0, 10.0, 50.0, 500, counts))
    t = 0.0
    for i, ms in enumerate(steps_ms):
        s.apply(StageSpan(11, "step", t, t + ms / 1000.0, batch=3 if i % 2 else 1))
        t += 0.05
    return s


def test_steps_and_the_worker_s_time_outside_the_forward() -> None:
    s = vllm_session({"prepare": 30, "forward": 40, "sample": 30}, [10.0] * 99 + [30.0])
    e = engine_summary(s, s.spans, 10.0, None, process_labels(s))
    assert e is not None and e.kind == "vllm" and e.steps == 100 and e.steps_per_s == 10.0
    assert e.step_ms is not None and e.step_ms[0] == pytest.approx(10.0)
    assert e.outside_forward == pytest.approx(0.6)  # prepare and sampling: 60 of 100 samples
    doc = engine_dict(e)
    assert doc is not None and doc["step_ms"]["p50"] == 10.0
    assert doc["worker_shares"] == {"forward": 0.4, "postprocess": 0.3, "prepare": 0.3}
    assert doc["running"] == {"p50": 2.0, "max": 3}  # a step's batch: half 1, half 3
    assert doc["kv_cache"] is None  # not read yet


def test_no_engine_no_section() -> None:
    s = Session()
    s.apply(TargetInfo(1, "python server.py"))
    s.apply(ProcessDef(1, 0, "python server.py"))
    assert engine_summary(s, [], 1.0, None, process_labels(s)) is None
    assert engine_dict(None) is None


@pytest.mark.parametrize(
    "share,samples,fires", [(0.29, 100, False), (0.30, 100, True), (0.70, 10, False)]
)
def test_engine_step_overhead_fires_from_a_third_of_the_worker_s_step(
    share: float, samples: int, fires: bool
) -> None:
    inp = FindingInput(engine_outside_forward=share, engine_worker_samples=samples,
                       engine_step_ms=12.0)  # fmt: skip
    f = RULES["engine-step-overhead"](inp, FindingThresholds())
    assert (f is not None) is fires
    if f is not None:
        assert f.evidence["step_p50_ms"] == 12.0 and "GPU idles" in f.hint


def test_only_a_step_that_ran_the_model_is_a_step_and_its_outputs_are_its_batch() -> None:
    from types import SimpleNamespace

    ran = _RETURN_FILTERS["step_ran"]
    assert not ran(({}, False)) and not ran(None)
    assert ran(({}, True)) is True  # ran, batch not told
    two_clients = {0: SimpleNamespace(outputs=[1, 2]), 1: SimpleNamespace(outputs=[3])}
    assert ran((two_clients, True)) == 3


def test_of_the_processes_only_the_model_worker_has_the_engine_s_finding() -> None:
    from infertop.analysis.engine import engine_of

    labels = ((10, "vllm api"), (11, "vllm engine core"), (12, "vllm model worker"),
              (13, "resource tracker"))  # fmt: skip
    assert engine_of(labels, None) and engine_of(labels, 12)
    assert not any(engine_of(labels, pid) for pid in (10, 11, 13))
    assert not engine_of(((1, "api"), (2, "inference 1")), None)
