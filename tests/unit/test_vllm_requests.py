"""vLLM's requests by its own ids: the agent reads each finished request's stats where vLLM
computes its metrics (``IterationStats.update_from_finished_request``) and sends its parts as
spans under vLLM's request id and as a generation call; the host's requests then join by id,
and the ASGI app's own names for the same requests do not count them twice."""

from __future__ import annotations

import collections
import time
from types import SimpleNamespace

from infertop.agent.payload import stages
from infertop.agent.payload.spans import _SpansMixin
from infertop.analysis.requests import summarize_requests
from infertop.model.events import StageSpan


class Agent(_SpansMixin):
    def __init__(self) -> None:
        self.spans: collections.deque = collections.deque()
        self.sent: list = []

    def _send(self, msg: dict) -> bool:
        self.sent.append(msg)
        return True


def finished(rid: str, arrival: float, mono0: float) -> SimpleNamespace:
    """A frame of update_from_finished_request: 1 ms in the API, 0.1 ms queued, 3 ms prefill,
    46 ms decode of 24 tokens; vLLM's first-token latency 4.5 ms."""
    st = SimpleNamespace(
        arrival_time=arrival, queued_ts=mono0 + 0.001, scheduled_ts=mono0 + 0.0011,
        first_token_ts=mono0 + 0.0041, last_token_ts=mono0 + 0.0501, num_generation_tokens=24,
        first_token_latency=0.0045,
    )  # fmt: skip
    return SimpleNamespace(f_locals={"req_stats": st, "request_id": rid, "num_prompt_tokens": 7})


def test_a_finished_request_is_sent_as_its_parts_and_a_generation_call() -> None:
    stages.ENGINE_REQUESTS.clear()
    offset = time.time_ns() - time.perf_counter_ns()
    mono0, arrival = time.perf_counter() - 1.0, time.time() - 1.0
    assert stages._CALL_FILTERS["vllm_finished"](finished("cmpl-1", arrival, mono0)) is None
    agent = Agent()
    agent._flush_engine_requests(offset)
    assert not stages.ENGINE_REQUESTS
    parts = {s[1]: (s[3] - s[2]) / 1e6 for s in agent.spans}  # ms
    assert {s[4] for s in agent.spans} == {"cmpl-1"}
    assert abs(parts["preprocess"] - 1.0) < 0.05 and abs(parts["queue"] - 0.1) < 0.01
    assert abs(parts["prefill"] - 3.0) < 0.01 and abs(parts["decode"] - 46.0) < 0.01
    (call,) = agent.sent[0]["calls"]
    tid, start, first, end, batch, prompt, new = call[:7]
    assert abs((first - start) * 1000 - 4.5) < 0.01  # vLLM's own first-token latency
    assert abs((end - first) * 1000 - 46.0) < 0.01 and (batch, prompt, new) == (1, 7, 24)


def test_requests_join_by_vllm_s_ids_and_the_asgi_names_do_not_count_twice() -> None:
    spans = []
    for i in range(10):
        t = 100.0 + i
        spans.append(StageSpan(1, "request", t, t + 0.06, f"POST /v1/completions #{i}"))
        for stage, a, b in (("preprocess", 0, 0.001), ("queue", 0.001, 0.0011),
                            ("prefill", 0.0011, 0.0041), ("decode", 0.0041, 0.0501)):  # fmt: skip
            spans.append(StageSpan(1, stage, t + a, t + b, f"cmpl-{i}"))
    req = summarize_requests(spans, 10.0)
    assert req is not None and req.count == 10 and req.joined == "id"
    parts = {st: p50 for st, p50, _p99 in req.breakdown_ms}
    assert abs(parts["decode"] - 46.0) < 0.01 and abs(parts["prefill"] - 3.0) < 0.01
