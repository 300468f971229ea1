"""vLLM's engine step as stages, on stacks py-spy took of a real vLLM 0.32 server (CPU build, a
tiny Llama, three streaming clients; tests/data/vllm/, the site-packages paths made neutral):
the engine core's spin on its worker's reply is the step's model execution, not ``queue``; the
worker's spin for the next step is ``idle``; the step's parts are ``schedule``, ``prepare``,
``forward``, ``postprocess`` and the hops ``ipc``."""

from __future__ import annotations

import collections
from pathlib import Path

from infertop.analysis.stages import StageClassifier
from infertop.collect.pyspy import parse_raw
from infertop.model.events import Frame

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm"
SITE = "/venv/lib/python3.12/site-packages/"


def shares(name: str) -> collections.Counter[str]:
    rows, bad = parse_raw((DATA / name).read_text())
    assert bad == 0 and rows
    classifier = StageClassifier()
    out: collections.Counter[str] = collections.Counter()
    for _tid, _name, frames, n in rows:
        out[classifier.classify(list(frames))[0]] += n
    return out


def test_the_engine_core_waiting_for_its_worker_is_the_model_step_not_a_queue() -> None:
    got = shares("engine_core.raw")
    assert "queue" not in got
    assert got["forward"] > 0.8 * sum(got.values())  # it spun on the worker's replies
    assert got["ipc"] > 0  # its hand-overs to the worker (the shared-memory queue, ZeroMQ)


def test_the_worker_s_step_is_prepare_forward_sampling_and_its_spin_is_idle() -> None:
    got = shares("worker.raw")
    assert "queue" not in got
    for stage in ("forward", "prepare", "postprocess", "ipc", "idle"):
        assert got[stage] > 0, (stage, got)
    assert got["other"] <= 0.02 * sum(got.values()), got


def stack(*frames: tuple[str, str]) -> list[Frame]:
    """Root first: (file under site-packages, function)."""
    return [Frame(fn, SITE + f, 1) for f, fn in frames]


def test_scheduling_and_updating_from_the_output_are_told_apart() -> None:
    c = StageClassifier()
    step = [("vllm/v1/engine/core.py", "EngineCoreProc.run_busy_loop"),
            ("vllm/v1/engine/core.py", "EngineCore.step")]  # fmt: skip
    sched = stack(*step, ("vllm/v1/core/sched/scheduler.py", "Scheduler.schedule"),
                  ("vllm/v1/core/kv_cache_manager.py", "KVCacheManager.allocate_slots"))  # fmt: skip
    update = stack(*step, ("vllm/v1/core/sched/scheduler.py", "Scheduler.update_from_output"))
    idle = [*stack(("vllm/v1/engine/core.py", "EngineCoreProc.run_busy_loop"),
                   ("vllm/v1/engine/core.py", "EngineCoreProc._process_input_queue")),
            Frame("Queue.get", "/usr/lib/python3.12/queue.py", 171),
            Frame("Condition.wait", "/usr/lib/python3.12/threading.py", 355)]  # fmt: skip
    assert c.classify(sched)[0] == "schedule"
    assert c.classify(update)[0] == "postprocess"
    assert c.classify(idle)[0] == "idle"  # no request to schedule: no work, not a queue


def test_sglang_s_scheduler_step_reads_the_same_way() -> None:
    c = StageClassifier()
    loop = ("sglang/srt/managers/scheduler.py", "Scheduler.event_loop_normal")
    cases = {
        "schedule": [loop, ("sglang/srt/managers/scheduler.py", "Scheduler.get_next_batch_to_run"),
                     ("sglang/srt/managers/schedule_policy.py", "PrefillAdder.add_one_req")],
        "forward": [loop, ("sglang/srt/managers/scheduler.py", "Scheduler.run_batch"),
                    ("sglang/srt/model_executor/model_runner.py", "ModelRunner.forward")],
        "postprocess": [loop, ("sglang/srt/managers/scheduler_components/batch_result_processor.py",
                               "process_batch_result_decode")],
        "ipc": [loop, ("sglang/srt/managers/scheduler.py", "Scheduler.ingest_requests")],
    }  # fmt: skip
    for stage, frames in cases.items():
        assert c.classify(stack(*frames))[0] == stage, (stage, frames)
