"""The bundled sample workloads: they run, report throughput, keep ground truth, stop cleanly.

The subprocess tests are ``slow`` (each runs a sample for a few seconds); the tokenizer, clock
and model checks at the bottom are quick and run in-process.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ACTIVE = ("preprocess", "forward", "postprocess", "serialize")
THROUGHPUT_RE = re.compile(r"^throughput: \d+\.\d req/s$")


def run_sample(args: list[str], truth: Path, duration: float = 6.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args, "--truth", str(truth), "--duration", str(duration)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
    )


def check_run(p: subprocess.CompletedProcess, truth: Path, stages: tuple[str, ...]) -> dict:
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    lines = p.stdout.splitlines()
    assert lines, "no throughput lines"
    assert all(THROUGHPUT_RE.match(line) for line in lines), p.stdout
    data = json.loads(truth.read_text())
    assert data["pid"] > 0
    assert data["written"] >= data["started"] > 0
    assert data["requests"] > 0
    assert set(data["stages"]) >= set(ACTIVE) | {"queue"}
    for name in stages:
        assert data["stages"][name] > 0, (name, data)
    return data


def shares(data: dict) -> dict[str, float]:
    total = sum(data["stages"][k] for k in ACTIVE)
    return {k: data["stages"][k] / total for k in ACTIVE}


# ---------------------------------------------------------------------------- processes
@pytest.mark.slow
def test_textgen_service_default_mix(tmp_path: Path) -> None:
    truth = tmp_path / "truth.json"
    p = run_sample(["samples/textgen_service.py"], truth)  # run as a script path
    data = check_run(p, truth, ACTIVE + ("queue",))
    s = shares(data)
    assert 0.3 <= s["forward"] <= 0.8, s
    assert s["preprocess"] >= 0.05, s
    assert s["postprocess"] >= 0.03 and s["serialize"] >= 0.03, s


@pytest.mark.slow
def test_textgen_service_slow_tokenizer(tmp_path: Path) -> None:
    truth = tmp_path / "truth.json"
    p = run_sample(["-m", "samples.textgen_service", "--slow-tokenizer"], truth)
    data = check_run(p, truth, ACTIVE)
    s = shares(data)
    assert s["preprocess"] >= 0.35, s


@pytest.mark.slow
def test_copy_heavy(tmp_path: Path) -> None:
    truth = tmp_path / "truth.json"
    p = run_sample(["-m", "samples.copy_heavy"], truth)
    data = check_run(p, truth, ("preprocess", "forward", "serialize"))
    assert shares(data)["forward"] >= 0.75, shares(data)


@pytest.mark.slow
def test_python_loop(tmp_path: Path) -> None:
    truth = tmp_path / "truth.json"
    p = run_sample(["samples/python_loop.py"], truth)
    data = check_run(p, truth, ("preprocess", "forward", "serialize"))
    assert shares(data)["forward"] >= 0.7, shares(data)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "sig"),
    [
        ("samples.textgen_service", signal.SIGTERM),
        ("samples.copy_heavy", signal.SIGINT),
        ("samples.python_loop", signal.SIGTERM),
    ],
)
def test_signal_stops_cleanly(tmp_path: Path, module: str, sig: signal.Signals) -> None:
    truth = tmp_path / "truth.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--truth", str(truth)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120  # torch's import and the tokenizer's training: slow when busy
        served = 0
        while time.time() < deadline and proc.poll() is None:
            try:
                served = json.loads(truth.read_text())["requests"]
            except (OSError, ValueError):
                served = 0
            if served > 0:
                break
            time.sleep(0.2)
        assert served > 0, "the sample never served a request"
        sent = time.time()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert err == ""
    final = json.loads(truth.read_text())
    assert final["written"] >= sent - 0.5
    assert final["requests"] >= served


@pytest.mark.slow
@pytest.mark.parametrize("script", ["textgen_service", "copy_heavy", "python_loop"])
def test_help(script: str) -> None:
    p = subprocess.run(
        [sys.executable, f"samples/{script}.py", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0 and p.stderr == ""
    for flag in ("--truth", "--duration", "--threads", "--seed"):
        assert flag in p.stdout


# ---------------------------------------------------------------------------- in-process
@pytest.fixture(scope="module")
def tokenizer():  # noqa: ANN201
    from samples.common.tokenizer import Tokenizer

    return Tokenizer()


ROUND_TRIP = [
    "The harbour master carried the brass lantern at dawn.",
    "Hello, world!  Punctuation: (a) [b] {c}; 'quotes' & \"double\" -- dashes... ?!",
    "numbers 1987, 3.14159 and under_scores __init__",
    "tabs\tand\nnewlines\r\n   trailing spaces   ",
    "unknown: héllo wörld, naïve café, 日本語, emoji 🙂🚀, math x² ∑ √2, \u00a0nbsp, e\u0301",
    "control \x00\x01\x1f chars and a lone surrogate-free string",
    "",
    " ",
    "Zyxwvutsrq qwertyuiop — words the corpus never had",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_tokenizer_round_trip(tokenizer, text: str) -> None:  # noqa: ANN001
    ids = tokenizer.encode(text)
    assert all(isinstance(i, int) and 0 <= i < tokenizer.pad_id for i in ids)
    assert tokenizer.decode(ids) == text


def test_tokenizer_learns_a_useful_vocabulary(tokenizer) -> None:  # noqa: ANN001
    assert len(tokenizer.merges) >= 1000
    assert tokenizer.vocab_size == 256 + len(tokenizer.merges) + 3
    # common words are single tokens; text compresses well below one token per byte
    assert len(tokenizer.encode(" the")) == 1
    text = "The gardener quietly repaired the wooden boat near the harbour."
    assert len(tokenizer.encode(text)) < len(text.encode()) / 3
    # bos, specials and decode of specials
    ids = tokenizer.encode("hi", add_bos=True)
    assert ids[0] == tokenizer.bos_id and tokenizer.decode(ids) == "hi"
    assert tokenizer.decode_token(tokenizer.pad_id) == "<pad>"


def test_tokenizer_build_is_quick() -> None:
    from samples.common.tokenizer import Tokenizer

    t0 = time.perf_counter()
    Tokenizer()
    assert time.perf_counter() - t0 < 3.0


def test_slow_encoder_gives_the_same_tokens(tokenizer) -> None:  # noqa: ANN001
    from samples.common.tokenizer import Tokenizer

    slow = Tokenizer(slow=True)
    for text in ROUND_TRIP:
        assert slow.encode(text) == tokenizer.encode(text)


def test_scanner_matches_the_regex_pretokenizer() -> None:
    from samples.common.tokenizer import _encode_split, _split_pieces

    alphabet = " \t\n\r  aAzé_1²٣,.!?🙂日\u0301\u00a0\x00-"
    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 14)))
        assert _encode_split(text) == _split_pieces(text), repr(text)


def test_encode_batch_left_pads_and_truncates(tokenizer) -> None:  # noqa: ANN001
    rows, lengths = tokenizer.encode_batch(["a b c d e f g", "hi"], max_length=4)
    assert len(rows[0]) == len(rows[1]) == max(lengths) <= 4
    assert rows[1][0] == tokenizer.pad_id and rows[1][-1] != tokenizer.pad_id


def test_stage_clock_writes_atomic_json(tmp_path: Path) -> None:
    from samples.common.truth import StageClock

    clock = StageClock()
    with clock.stage("forward"):
        time.sleep(0.01)
    with clock.stage("preprocess"):
        pass
    clock.count(3)
    path = tmp_path / "truth.json"
    clock.start_flusher(str(path), interval=0.05)
    time.sleep(0.2)
    clock.close(str(path))
    data = json.loads(path.read_text())
    assert data["pid"] == os.getpid() and data["requests"] == 3
    assert data["stages"]["forward"] >= 0.009
    assert set(data["stages"]) == {"preprocess", "forward", "postprocess", "serialize", "queue"}
    assert [p.name for p in tmp_path.iterdir()] == ["truth.json"]  # no temp files left


def test_incremental_generation_matches_full_forward(tokenizer) -> None:  # noqa: ANN001
    import torch

    from samples.textgen_service import GenState, build_model, parse_args, tokenize_batch

    args = parse_args(["--max-prompt-tokens", "64"])
    torch.manual_seed(0)
    model = build_model(tokenizer.vocab_size, args)
    prompts = ["Hello there, how are you?", "A longer prompt about the harbour and the old mill."]
    ids, pad, _ = tokenize_batch(tokenizer, prompts, 64)
    step_ids = torch.tensor([[5], [7]])
    with torch.inference_mode():
        state = GenState(pad)
        model(ids, state)
        incremental = model(step_ids, state)
        full_ids = torch.cat([ids, step_ids], 1)
        full_pad = torch.cat([pad, torch.zeros(2, 1, dtype=torch.bool)], 1)
        full = model(full_ids, GenState(full_pad))
        # a left-padded row gives the same logits as the same prompt alone
        alone_ids, alone_pad, _ = tokenize_batch(tokenizer, prompts[:1], 64)
        alone = model(alone_ids, GenState(alone_pad))
        padded = model(ids, GenState(pad))
    assert torch.allclose(incremental, full, atol=1e-4)
    assert torch.allclose(alone[0], padded[0], atol=1e-4)
