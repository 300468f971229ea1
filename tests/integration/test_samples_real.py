"""What a user sees on each sample, recorded with real py-spy and the real agent: the planted
bottleneck found and named, every stage of the pipeline there, generation split into prefill
and decode and its calls timed as the service times them.

How close the shares come to each sample's own clock is a benchmark, not a test:
``make accuracy`` (benchmarks/accuracy.py) prints ours beside the truth and raw py-spy's;
docs/performance.md keeps the table. The claims here hold with margins the machine's load
cannot cross: a bottleneck planted at most of the time is the largest stage whatever the
load, and a finding's rule is named.
"""

from __future__ import annotations

import json

import pytest

from infertop.model.events import GenerationCall
from infertop.record.reader import read_recording
from tests.support.generation_truth import check_against_own

from .helpers import VENV312, infertop, read_truth, report_json, start_target, stop_target, until

pytestmark = pytest.mark.slow
WORK = ("preprocess", "forward", "postprocess", "serialize")


def _record(
    tmp_path, argv: list[str], duration: str = "6", python: str | None = None, extra: tuple[str, ...] = ()
) -> tuple[dict, str]:
    """Start a sample with its truth file, wait until it serves, record it with the defaults;
    its report and the truth file's path. The target must be unharmed: still running, nothing
    on its stderr."""
    truth = str(tmp_path / "truth.json")
    target = start_target([*argv, "--truth", truth], python=python)
    try:
        until(lambda: sum(read_truth(truth).get("stages", {}).values()) > 0.5, 90, f"work in {truth}")
        out = str(tmp_path / "s.infertop")
        p = infertop("record", str(target.pid), "-o", out, "--duration", duration, *extra, timeout=180)
        alive = target.poll() is None
    finally:
        _, err = stop_target(target)
    assert alive, f"the target must still be running; its stderr: {err[-3000:]}"
    assert p.returncode == 0, p.stderr
    assert err == "", f"the target's stderr got: {err[:500]}"
    return report_json(out), out


@pytest.mark.parametrize(
    "argv,largest,finding",
    [
        # a pure-Python BPE made slow on purpose: most of the batcher's time
        (["-m", "samples.textgen_service", "--slow-tokenizer"], "preprocess", "preprocess-hot"),
        # a forward of several hundred tiny ops per request: interpreter and dispatch overhead
        (["-m", "samples.python_loop"], "forward", None),
        # a forward of dtype round-trips, clones and layout copies around two small matmuls
        (["-m", "samples.copy_heavy"], "forward", None),
    ],
    ids=["slow_tokenizer", "python_loop", "copy_heavy"],
)
def test_the_planted_bottleneck_is_the_largest_stage_and_named(
    tmp_path, argv: list[str], largest: str, finding: str | None
) -> None:
    rep, _ = _record(tmp_path, argv)
    shares = {s["name"]: s["share"] for s in rep["stages"]}
    work = {s: shares.get(s, 0.0) for s in WORK}
    assert max(work, key=work.__getitem__) == largest, shares
    # the hottest frames point into the sample's own code or torch
    assert any("samples" in f["file"] or "torch" in f["file"] for f in rep["top_frames"][:5]), rep["top_frames"][:5]
    if finding is not None:
        assert finding in {f["rule"] for f in rep["findings"]}, rep["findings"]


def test_a_batching_service_shows_every_stage_of_its_pipeline(tmp_path) -> None:
    """The text-generation sample as shipped: a batcher thread between client threads. Each of
    its stages is there, and the clients' waits for their replies are queue, not work."""
    rep, _ = _record(tmp_path, ["-m", "samples.textgen_service"])
    names = {s["name"] for s in rep["stages"]}
    assert set(WORK) <= names, names
    assert "queue" in names, names


def test_native_threads_and_a_sleeping_helper_leave_the_stages_whole(tmp_path) -> None:
    """The Hugging Face fast tokenizer (Rust, parallel), a BertModel and multi-threaded zstd in
    serialize, a helper thread that only sleeps and writes a file: the wall view has each stage,
    the model's forward the largest, and the helper's sleep is not work."""
    rep, _ = _record(tmp_path, ["tests/integration/targets/embed_loop.py", "--compress"])
    assert rep["sampling"]["views"] == ["wall", "cpu"]
    wall = {s["name"]: s["share"] for s in rep["stages"]}
    assert {"preprocess", "forward", "serialize"} <= set(wall), wall
    assert max(("preprocess", "forward", "serialize"), key=wall.__getitem__) == "forward", wall
    assert wall.get("other", 0.0) < 0.25, wall


def test_hugging_face_generate_splits_into_prefill_and_decode(tmp_path) -> None:
    """Real ``generate`` (a random-weight GPT-2, KV cache on, batches of up to 8): its samples
    under ``_prefill`` are prefill, those of the ``_sample`` loop decode (most of a call: one
    forward a token), the model's forward inside each, never a stage of its own."""
    rep, _ = _record(tmp_path, ["-m", "samples.textgen_service", "--hf"])
    wall = {s["name"]: s["share"] for s in rep["stages"]}
    assert {"prefill", "decode"} <= set(wall), wall
    assert wall["decode"] > wall["prefill"], wall
    assert wall.get("forward", 0.0) < wall["decode"] / 4, wall


@pytest.mark.parametrize("where", ["3.12", "venv"])
def test_generation_calls_are_timed_as_the_service_times_them(tmp_path, where: str) -> None:
    """Real ``generate`` on Python 3.12 (sys.monitoring) and on the dev venv's Python (3.11:
    the agent's wrappers), dynamic batches of 2-8 from 8 clients, attached with the defaults:
    per call the agent's TTFT and TPOT p50 within 15 % of the service's own (both clocks time
    the same calls, so the machine's load moves both alike), the batch sizes' p50 and max
    exact, the KV cache's largest within 10 % of its size from the model's shape."""
    if where == "3.12" and not VENV312.exists():
        pytest.skip(f"needs {VENV312} (make .venv312/.installed: Python 3.12 with torch, transformers)")
    argv = ["samples/textgen_service.py", "--hf", "--clients", "8", "--rate", "6"]
    rep, out = _record(tmp_path, argv, duration="10", python=str(VENV312) if where == "3.12" else None)
    g = rep["generation"]
    assert g is not None and g["calls"] >= 5, g
    calls = [e for e in read_recording(out).events if isinstance(e, GenerationCall)]
    with open(tmp_path / "truth.json") as fh:
        check_against_own(f"textgen --hf on {where}", g, calls, json.load(fh)["calls"]["generation"])
    wall = {s["name"]: s["share"] for s in rep["stages"]}
    assert {"prefill", "decode"} <= set(wall), wall


@pytest.mark.parametrize("where", ["3.12", "venv"])
def test_a_hand_written_loop_named_by_generate_is_timed_as_generation(tmp_path, where: str) -> None:
    """The sample's own decoding loop (``generate``: a prefill forward, then a forward per new
    token, no Hugging Face), named by ``--generate`` on Python 3.12 and on the dev venv's (3.11:
    the wrappers): every call is a generation call of the sample's 16 new tokens and batches of
    its 4 clients at most, each split into one prefill and one decode."""
    if where == "3.12" and not VENV312.exists():
        pytest.skip(f"needs {VENV312} (make .venv312/.installed: Python 3.12 with torch, transformers)")
    python = str(VENV312) if where == "3.12" else None
    extra = ("--generate", "*textgen_service.py:generate")
    rep, _ = _record(tmp_path, ["-m", "samples.textgen_service"], duration="8", python=python, extra=extra)
    g = rep["generation"]
    assert g is not None and g["calls"] >= 5, g
    assert g["new_tokens"]["p50"] == g["new_tokens"]["max"] == 16, g["new_tokens"]  # --new-tokens
    assert 1 <= g["batch_size"]["max"] <= 4, g["batch_size"]  # --clients 4
    assert g["kv_cache"] is None  # no cache object the agent can read in a hand-written loop
    assert 0 < g["ttft_ms"]["p50"] < g["latency_ms"]["p50"] and g["tpot_ms"]["p50"] > 0, g
    calls = {s["name"]: s["calls"] for s in rep["stages"]}
    assert calls["prefill"] == calls["decode"] == g["calls"], calls
