"""Generation calls summed up (``analysis/generation.py``) and carried through a recording, the
agent's message and the report (docs/generation.md): TTFT, TPOT, tokens, batch sizes, the KV
cache, and what made the slowest calls slow."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infertop.analysis.generation import summarize_generations, tpot_ms, ttft_ms
from infertop.collect.agent.client import convert
from infertop.model.events import GenerationCall, StageSpan
from infertop.record.format import decode_event, encode_event
from infertop.report.generation import generation_lines, generation_record
from infertop.report.records import as_json


def call(t: float, ttft: float, total: float, batch: int = 4, prompt: int = 32, new: int = 17,
         kv: int | None = 1000, tid: int = 7, device: str | None = "cpu") -> GenerationCall:  # fmt: skip
    return GenerationCall(tid, t, t + ttft / 1000, t + total / 1000, batch, prompt, new,
                          kv, device if kv is not None else None, new)  # fmt: skip


def test_ttft_and_tpot_are_per_call() -> None:
    c = call(100.0, ttft=20.0, total=100.0, new=17)
    assert ttft_ms(c) == pytest.approx(20.0)
    assert tpot_ms(c) == pytest.approx(80.0 / 16)  # (last - first token) / (new - 1)
    assert tpot_ms(call(0.0, 5.0, 5.0, new=1)) is None  # one token: no time per token
    assert ttft_ms(GenerationCall(1, 0.0, None, 1.0)) is None


def test_nothing_seen_is_none_and_the_report_says_null() -> None:
    assert summarize_generations([]) is None
    assert generation_record(None) is None
    assert generation_lines({"generation": None}) == []


def test_percentiles_tokens_batches_and_cache() -> None:
    calls = [call(float(i), ttft=10.0 + i, total=50.0 + 2 * i, batch=1 + i % 4, kv=1000 * (1 + i % 4))
             for i in range(40)]  # fmt: skip
    g = summarize_generations(calls)
    assert g is not None and g.calls == 40
    assert g.ttft_ms.p50 == pytest.approx(29.5)
    assert g.batch_size.p50 == 2.5 and g.batch_size.max == 4 and g.batch_size.mean == pytest.approx(2.5)
    assert [(b.batch, b.calls) for b in g.by_batch] == [(1, 10), (2, 10), (3, 10), (4, 10)]
    # tokens per second: every sequence's new tokens over the calls' seconds
    assert g.tokens_per_s == pytest.approx(sum(17 * c.batch for c in calls) / sum(c.t_end - c.t_start for c in calls))
    kv = g.kv_cache
    assert kv is not None and kv.bytes_max == 4000 and kv.device == "cpu"
    assert kv.bytes_per_token == pytest.approx(1000 / (32 + 17 - 1))  # per position of a sequence
    assert kv.headroom_bytes is None  # not on a GPU
    d = as_json(generation_record(g))
    assert list(d) == ["calls", "ttft_ms", "tpot_ms", "tokens_per_s", "new_tokens", "prompt_tokens",
                       "batch_size", "kv_cache", "latency_ms", "by_batch", "slowest"]  # fmt: skip
    assert d["kv_cache"]["bytes_max"] == 4000 and d["batch_size"] == {"p50": 2.5, "max": 4.0, "mean": 2.5}


def test_headroom_is_only_for_a_cache_on_a_gpu() -> None:
    calls = [call(0.0, 5.0, 20.0, batch=8, prompt=100, new=11, kv=8 * 110 * 2048, device="cuda:0")]
    g = summarize_generations(calls, free_bytes=123456)
    assert g.kv_cache.headroom_bytes == 123456
    assert g.kv_cache.worst_case_bytes == 8 * 111 * 2048  # the largest batch x the longest x per token


def test_a_slow_call_says_which_part_made_it_slow() -> None:
    calls = [call(float(i), ttft=10.0, total=60.0) for i in range(20)]
    calls.append(call(30.0, ttft=95.0, total=145.0, prompt=900))  # a long prompt
    calls.append(call(31.0, ttft=10.0, total=300.0, new=80))  # many tokens
    queue = StageSpan(7, "queue", 40.0 - 0.2, 40.0)  # 200 ms queued just before this one
    calls.append(call(40.0, ttft=10.0, total=61.0))
    spans = [queue] + [StageSpan(7, "queue", c.t_start - 0.002, c.t_start) for c in calls[:20]]
    g = summarize_generations(calls, spans)
    why = {round(c.duration_ms): c.why for c in g.slowest}
    assert why[300] == "decode" and why[145] == "prefill"
    slow = {round(c.duration_ms): c for c in g.slowest}
    assert slow[145].prefill_ms == pytest.approx(95.0) and slow[145].decode_ms == pytest.approx(50.0)
    queued = next(c for c in g.slowest if c.t == 40.0)
    assert queued.queue_ms == pytest.approx(200.0) and queued.why == "queue"
    text = "\n".join(generation_lines({"generation": as_json(generation_record(g))}))
    assert "mostly decode" in text and "mostly prefill" in text


def test_a_generation_call_round_trips_through_the_recording_format() -> None:
    c = call(1700000000.25, 12.5, 80.0, kv=None)
    assert decode_event(encode_event(c)) == c
    assert decode_event(encode_event(GenerationCall(3, 1.0, None, 2.0, pid=42))) == GenerationCall(3, 1.0, None, 2.0, pid=42)
    with pytest.raises(ValueError):  # a first token outside its call is damage
        decode_event([18, 1, 5.0, 9.0, 6.0, None, None, None, None, None, 0])


def test_forward_calls_by_batch_size_from_the_agent_s_spans() -> None:
    from infertop.analysis.batches import calls_by_batch

    spans = [StageSpan(1, "forward", float(i), i + (0.010 if i % 2 else 0.016), None, 2 if i % 2 else 8)
             for i in range(10)]  # fmt: skip
    spans += [StageSpan(1, "forward", 20.0, 20.5), StageSpan(1, "preprocess", 21.0, 21.1, "r", 2)]
    rows = calls_by_batch(spans)
    assert [(b.batch, b.calls) for b in rows["forward"]] == [(2, 5), (8, 5)]  # a span without: not counted
    assert rows["forward"][1].latency_ms_p50 == pytest.approx(16.0)
    assert [(b.batch, b.calls) for b in rows["preprocess"]] == [(2, 1)]
    (span,) = convert({"type": "spans", "spans": [[5, "forward", 1.0, 1.02, None, 8]]})
    assert span == StageSpan(5, "forward", 1.0, 1.02, None, 8)
    (named,) = convert({"type": "spans", "spans": [[5, "serialize", 1.0, 1.02, "POST /x #1"]]})
    assert named.request == "POST /x #1" and named.batch is None


def test_the_agent_s_message_becomes_events_with_unknowns_as_none() -> None:
    msg = {"type": "generations", "calls": [
        [11, 10.0, 10.02, 10.1, 4, 32, 17, 4096, "cuda:0", 17],
        [11, 11.0, -1, 11.1, -1, -1, -1, -1, "", 0],
    ]}  # fmt: skip
    a, b = convert(msg)
    assert a == GenerationCall(11, 10.0, 10.02, 10.1, 4, 32, 17, 4096, "cuda:0", 17)
    assert b == GenerationCall(11, 11.0, None, 11.1)


def test_kv_cache_headroom_fires_when_the_largest_batch_at_the_longest_sequence_would_not_fit() -> None:
    from infertop.analysis.findings import FindingInput, evaluate

    per_token = 2 * 24 * 2 * 16 * 128  # keys and values of 24 layers, 16 heads of 128, fp16
    calls = [  # most calls are short; one batch of 16 and one prompt of 3000 tokens were seen
        call(float(i), 30.0, 400.0, batch=4, prompt=200, new=101, device="cuda:0", kv=4 * 300 * per_token)
        for i in range(30)
    ]  # fmt: skip
    calls.append(call(40.0, 30.0, 500.0, batch=16, prompt=200, new=101, device="cuda:0", kv=16 * 300 * per_token))
    calls.append(call(41.0, 90.0, 800.0, batch=1, prompt=3000, new=101, device="cuda:0", kv=3100 * per_token))
    roomy = summarize_generations(calls, free_bytes=80 * 2**30)
    tight = summarize_generations(calls, free_bytes=8 * 2**30)
    assert tight.kv_cache.worst_case_bytes == 16 * 3101 * per_token  # 37.9 GiB
    assert not [f for f in evaluate(FindingInput(generation=roomy)) if f.rule == "kv-cache-headroom"]
    (f,) = [f for f in evaluate(FindingInput(generation=tight)) if f.rule == "kv-cache-headroom"]
    assert f.severity == "high" and f.evidence["max_batch"] == 16 and f.evidence["max_tokens"] == 3101
    assert f.evidence["headroom_bytes"] == 8 * 2**30 and "paged" in f.hint
    on_cpu = summarize_generations([replace(c, kv_device="cpu") for c in calls], free_bytes=1)
    assert not [f for f in evaluate(FindingInput(generation=on_cpu)) if f.rule == "kv-cache-headroom"]
