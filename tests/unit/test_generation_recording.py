"""A recording of real Hugging Face ``generate`` calls (``tests/data/recordings/textgen_hf.infertop``,
29 calls of a random-weight GPT-2 on Python 3.12) reported and exported: the report's
``generation`` section and its text, prefill and decode as stages, and one ``generate`` slice per
call with its prefill and decode inside in the Chrome export."""

from __future__ import annotations

import pytest
from support.chrome_trace import load, validate

from infertop.analysis.generation import tpot_ms, ttft_ms
from infertop.config import Config
from infertop.export.run import export
from infertop.model.events import GenerationCall
from infertop.record.reader import read_recording
from infertop.record.stream import RecordingStream
from infertop.report.recording import recording_report
from infertop.report.text import render_text
from tests.support import data

RECORDING = data.DATA / "recordings" / "textgen_hf.infertop"


@pytest.fixture(scope="module")
def calls() -> list[GenerationCall]:
    if not RECORDING.is_file():
        pytest.fail(f"test data missing: {RECORDING}")
    return [e for e in RecordingStream(str(RECORDING)) if isinstance(e, GenerationCall)]


@pytest.fixture(scope="module")
def report() -> dict:
    return recording_report(read_recording(str(RECORDING)), Config()).report


def test_the_report_sums_every_call(calls, report) -> None:
    g = report["generation"]
    assert g["calls"] == len(calls) == 29
    ttfts = sorted(ttft_ms(c) for c in calls)
    assert g["ttft_ms"]["p50"] == pytest.approx(ttfts[14], abs=0.001)
    tpots = sorted(tpot_ms(c) for c in calls)
    assert g["tpot_ms"]["p50"] == pytest.approx(tpots[14], abs=0.001)
    assert g["batch_size"]["max"] == max(c.batch for c in calls) == 8
    assert {b["batch"]: b["calls"] for b in g["by_batch"]} == {2: 2, 7: 1, 8: 26}
    assert g["new_tokens"] == {"p50": 16.0, "max": 16.0} and g["prompt_tokens"]["max"] == 128.0
    # the cache of a 2-layer, 128-wide GPT-2 in float32: 2 KiB per position of a sequence
    assert g["kv_cache"]["bytes_per_token"] == 2048.0 and g["kv_cache"]["device"] == "cpu"
    assert g["kv_cache"]["bytes_max"] == 8 * (128 + 16 - 1) * 2048
    assert g["kv_cache"]["headroom_bytes"] is None
    names = [s["name"] for s in report["stages"]]
    assert "prefill" in names and "decode" in names
    stages = {s["name"]: s for s in report["stages"]}
    assert stages["prefill"]["calls"] == stages["decode"]["calls"] == 29  # one of each per call
    assert stages["forward"]["calls"] is None  # a generate call is no forward call


def test_the_text_report_has_the_generation_lines(report) -> None:
    text = render_text(report)
    head = next(line for line in text.splitlines() if line.startswith("generation:"))
    assert "29 calls" in head and "TTFT p50" in head and "TPOT p50" in head and "tokens/s" in head
    assert "by batch size (calls × p50 latency): 2: 2 ×" in text
    assert "KV cache (cpu): p50 2.2 MiB, max 2.2 MiB, 2.0 KiB per token of a sequence" in text


def test_each_call_is_a_generate_slice_holding_its_prefill_and_decode(calls, tmp_path) -> None:
    out = str(tmp_path / "hf.json")
    export(str(RECORDING), "chrome", out)
    doc = load(out)
    assert validate(doc).problems == []
    gen = [e for e in doc["traceEvents"] if e.get("cat") == "generation"]
    outer = sorted((e for e in gen if e["name"] == "generate"), key=lambda e: e["ts"])
    assert len(outer) == 29
    for e in outer:
        inside = [x for x in gen if x["name"] in ("prefill", "decode") and x["tid"] == e["tid"]
                  and e["ts"] <= x["ts"] and x["ts"] + x["dur"] <= e["ts"] + e["dur"] + 0.01]  # fmt: skip
        assert sorted(x["name"] for x in inside) == ["decode", "prefill"]
        assert e["args"]["batch"] in (2, 7, 8) and e["args"]["new_tokens"] == 16
        assert e["args"]["kv_cache_bytes"] > 0 and e["args"]["ttft_ms"] > 0
    names = {m["args"]["name"] for m in doc["traceEvents"] if m["ph"] == "M" and m["name"] == "thread_name"}
    assert "generation · batcher" in names
