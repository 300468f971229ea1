"""An LLM engine's scheduler state (vLLM's ``SchedulerStats`` and ``IterationStats``, read by
the agent where the API process records its metrics): summed per window in the agent, carried
as recording code 24, and read back into the report's ``engine`` (running, waiting, KV-cache
usage, preemptions, tokens) and ``kv-cache-headroom``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from infertop.agent.payload import engine_stats, stages
from infertop.analysis.engine import scheduler_summary
from infertop.analysis.findings import RULES, FindingInput
from infertop.cli import main
from infertop.collect.agent.client import convert
from infertop.config import FindingThresholds
from infertop.model.engine import EngineStats, keep
from infertop.model.events import ProcessDef, StageSpan, TargetInfo, ThreadDef
from infertop.record.format import MINOR
from infertop.record.reader import read_recording
from infertop.record.writer import RecordingWriter


def record_call(running: int, waiting: int, usage: float, *, prompt: int = 0, gen: int = 0,
                preempted: int = 0, stats: bool = True) -> SimpleNamespace:  # fmt: skip
    """A frame of ``StatLoggerManager.record(scheduler_stats, iteration_stats, ...)``."""
    sched = SimpleNamespace(
        num_running_reqs=running, num_waiting_reqs=waiting, num_skipped_waiting_reqs=0,
        kv_cache_usage=usage, prefix_cache_stats=SimpleNamespace(queries=10, hits=4),
    )  # fmt: skip
    it = SimpleNamespace(num_prompt_tokens=prompt, num_generation_tokens=gen, num_preempted_reqs=preempted)
    return SimpleNamespace(f_locals={"scheduler_stats": sched if stats else None,
                                     "iteration_stats": it, "engine_idx": 0})  # fmt: skip


def test_the_agent_sums_each_step_and_the_client_reads_the_window() -> None:
    engine_stats.take_engine_stats(last=True)
    filt = stages._CALL_FILTERS["vllm_stats"]
    for k in range(10):  # 3 running, 1 waiting for the first 4 steps, the cache filling
        assert filt(record_call(3, 1 if k < 4 else 0, 0.1 * k, prompt=7 if k < 3 else 0, gen=3)) is None
        time.sleep(0.002)
    assert filt(record_call(0, 0, 0.0, preempted=1, stats=False)) is None  # outputs without stats
    assert filt(SimpleNamespace(f_locals={})) is None
    rows = engine_stats.take_engine_stats()
    assert engine_stats.take_engine_stats() == []  # taken
    (ev,) = convert(json.loads(json.dumps({"type": "engine", "stats": rows})))
    assert isinstance(ev, EngineStats)
    assert ev.steps == 10 and ev.running == ((3, 10),) and ev.waiting == ((0, 6), (1, 4))
    assert dict(ev.kv_usage)[90] == 1 and ev.kv_usage_max == pytest.approx(0.9)
    assert (ev.prompt_tokens, ev.generation_tokens, ev.preempted) == (21, 30, 1)
    assert (ev.prefix_queries, ev.prefix_hits) == (100, 40)
    # over time: 9 intervals between the 10 steps, each holding the earlier step's state
    assert 0.015 < ev.held_s <= ev.t_end - ev.t_start  # (the last call had no scheduler stats)
    assert ev.running_s == pytest.approx(3 * ev.held_s) and 0 < ev.waiting_s < ev.held_s
    assert 0 < ev.kv_usage_s < 0.8 * ev.held_s
    engine_stats.take_engine_stats(last=True)


def window(t: float, running: dict[int, int], waiting: dict[int, int], kv: dict[int, int],
           kv_max: float, preempted: int = 0) -> EngineStats:  # fmt: skip
    steps = sum(running.values())
    # over time: 2.5 requests running, none waiting, the cache 30 % full on average
    return EngineStats(t, t + 0.5, 0, steps, tuple(sorted(running.items())),
                       tuple(sorted(waiting.items())), tuple(sorted(kv.items())), kv_max,
                       preempted, 10 * steps, 4 * steps, 100, 25, 0.5, 1.25, 0.0, 0.15)  # fmt: skip


def vllm_recording(path: Path, windows: list[EngineStats]) -> str:
    w = RecordingWriter(str(path))
    cmd = "/venv/bin/python -m vllm.entrypoints.openai.api_server"
    evs: list = [TargetInfo(10, cmd, "3.12.1", None, 100.0)]
    for pid, ppid, c in ((10, 0, cmd), (11, 10, "VLLM::EngineCore"), (12, 11, "VLLM::Worker")):
        evs += [ProcessDef(pid, ppid, c), ThreadDef(pid, "MainThread", pid)]
    evs += [StageSpan(11, "step", 100.0 + 0.05 * i, 100.0 + 0.05 * i + 0.01, batch=3) for i in range(200)]
    w.write(evs + windows)
    w.close()
    return str(path)


def test_a_recording_s_windows_are_the_report_s_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 20 windows of 10 steps: 3-4 requests running, the queue empty but for a burst of 5, the
    # cache at 20-40 % and once 95 %, with 2 requests preempted
    wins = [window(100.0 + 0.5 * i, {3: 6, 4: 4}, {0: 9, 5: 1} if i == 7 else {0: 10},
                   {20: 5, 40: 5} if i != 12 else {40: 9, 95: 1}, 0.4 if i != 12 else 0.953,
                   2 if i == 12 else 0) for i in range(20)]  # fmt: skip
    path = vllm_recording(tmp_path / "vllm.infertop", wins)
    rec = read_recording(path)
    assert rec.version == (1, MINOR) and [e for e in rec.events if isinstance(e, EngineStats)] == wins
    capsys.readouterr()
    assert main(["report", path, "--format", "json"]) == 0
    e = json.loads(capsys.readouterr().out)["engine"]
    assert e["scheduler_steps"] == 200 and e["running"] == {"p50": 3.0, "max": 4}
    assert e["waiting"] == {"p50": 0.0, "max": 5}
    assert e["kv_cache"]["usage_p50"] == 0.4 and e["kv_cache"]["usage_max"] == 0.953
    assert e["kv_cache"]["preemptions"] == 2 and e["preemptions"] == 2
    assert e["kv_cache"]["prefix_hit_rate"] == 0.25
    assert e["prefill_tokens_per_step"] == 10.0 and e["decode_tokens_per_step"] == 4.0
    assert e["generation_tokens_per_s"] == 80.0  # 800 tokens from the first step to the last: 10 s
    assert e["time_means"] == {"running": 2.5, "waiting": 0.0, "kv_usage": 0.3}
    assert main(["report", path, "--format", "json"]) == 0
    rules = {f["rule"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert rules["kv-cache-headroom"]["severity"] == "high"  # preempted
    assert rules["kv-cache-headroom"]["evidence"]["preemptions"] == 2
    assert main(["report", path]) == 0
    text = capsys.readouterr().out
    assert "running p50 3 max 4, waiting p50 0 max 5" in text
    assert "KV cache: usage p50 40% max 95.3%, 2 preemptions, prefix cache hits 25%" in text
    assert "over time (as vLLM's gauges): running 2.50, waiting 0.00, KV cache 30.0% on average" in text


def test_no_scheduler_read_leaves_the_fields_null(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = vllm_recording(tmp_path / "old.infertop", [])
    capsys.readouterr()
    assert main(["report", path, "--format", "json"]) == 0
    e = json.loads(capsys.readouterr().out)["engine"]
    assert e["running"] == {"p50": 3.0, "max": 3}  # the steps' own batches, as before
    assert e["waiting"] is None and e["kv_cache"] is None and e["preemptions"] is None
    assert e["time_means"] is None


@pytest.mark.parametrize("usage,preempted,fires,severity", [
    ((0.3, 0.89), 0, False, None), ((0.5, 0.90), 0, True, "medium"), ((0.3, 0.5), 1, True, "high"),
    ((0.9, 1.0), 0, True, "high"),
])  # fmt: skip
def test_kv_cache_headroom_for_an_engine(usage: tuple[float, float], preempted: int, fires: bool,
                                         severity: str | None) -> None:  # fmt: skip
    inp = FindingInput(engine_kv_usage=usage, engine_preemptions=preempted, engine_waiting_max=3)
    f = RULES["kv-cache-headroom"](inp, FindingThresholds())
    assert (f is not None) is fires
    if f is not None:
        assert f.severity == severity and f.evidence["source"] == "engine"
    assert RULES["kv-cache-headroom"](FindingInput(), FindingThresholds()) is None


def test_a_long_session_merges_its_older_windows_without_losing_a_step() -> None:
    kept: list[EngineStats] = []
    for i in range(1000):
        keep(kept, window(100.0 + 0.5 * i, {i % 7: 2}, {0: 2}, {i % 50: 2}, (i % 50) / 100), 100)
    assert len(kept) <= 100
    assert sum(s.steps for s in kept) == 2000 and [s.t_end for s in kept] == sorted(s.t_end for s in kept)
    whole = scheduler_summary(kept)
    assert whole is not None and whole.running == (3.0, 6) and whole.kv_usage[1] == 0.49
    upto = scheduler_summary(kept, 530.0)  # a playhead past the merged old ones: ended by then
    assert upto is not None and 0 < upto.steps < 2000


class StatLoggerManager:  # vLLM's signature (vllm/v1/metrics/loggers.py)
    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=None):  # type: ignore[no-untyped-def]
        return None


def test_before_3_12_the_wrapper_reads_the_call_s_arguments_too() -> None:
    """Python 3.10 and 3.11 time by wrappers: the filter reads the arguments vLLM passes by
    keyword, and the call is not sent as a span."""
    from infertop.agent.payload.wrappers import _Wrappers

    code = StatLoggerManager.record.__code__
    spans: list = []
    timer = _Wrappers({code: "request"}, lambda *a: spans.append(a), filters={code: stages._CALL_FILTERS["vllm_stats"]})
    engine_stats.take_engine_stats(last=True)
    timer.install()
    try:
        frame = record_call(2, 1, 0.5, prompt=4, gen=2)
        for _ in range(3):
            StatLoggerManager().record(engine_idx=0, **{k: v for k, v in frame.f_locals.items() if k != "engine_idx"})
    finally:
        timer.uninstall()
    (row,) = engine_stats.take_engine_stats(last=True)
    assert row["steps"] == 3 and row["running"] == [(2, 3)] and row["waiting"] == [(1, 3)]
    assert (row["prompt_tokens"], row["generation_tokens"]) == (12, 6) and not spans
