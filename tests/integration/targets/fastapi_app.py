"""A one-process FastAPI app as someone would write one for a model, for the default-latency
test (Python >= 3.12 with fastapi, uvicorn and transformers; not a test itself).

``POST /embed`` with ``{"text": ...}``: a plain ``def`` endpoint (FastAPI runs it on its thread
pool) tokenizes the text with a real Hugging Face fast tokenizer (a word-level vocabulary built
here, nothing downloaded), runs the "model" (~12 ms of pure Python: this Python has no torch)
and returns a dict, which FastAPI serializes with ``json.dumps``. Writes ``--status`` every
0.2 s: the port, the requests served and the tokenizer calls' own durations (ms, perf_counter
around each call), the truth the agent's default timing is held to.
"""

from __future__ import annotations

import argparse
import math
import threading
import time

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from serving_status import write_status_forever
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

WORDS = [f"w{i}" for i in range(2000)]


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"[UNK]": 0, "[PAD]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


TOKENIZER = build_tokenizer()
WEIGHTS = [math.sin(i) for i in range(len(WORDS) + 2)]
STATE: dict = {"served": 0, "tokenize_ms": []}
LOCK = threading.Lock()


class Query(BaseModel):
    text: str


def model(ids: list[int]) -> float:
    end = time.perf_counter() + 0.012
    acc = 0.0
    while time.perf_counter() < end:
        for i in ids[:64]:
            acc += WEIGHTS[i]
    return acc


app = FastAPI()


@app.post("/embed")
def embed(q: Query) -> dict:
    t0 = time.perf_counter()
    enc = TOKENIZER([q.text, q.text[::-1]], padding=True)
    took = (time.perf_counter() - t0) * 1000.0
    score = model(enc["input_ids"][0])
    with LOCK:
        STATE["served"] += 1
        STATE["tokenize_ms"].append(round(took, 4))
    return {"score": score, "tokens": len(enc["input_ids"][0])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--status", required=True)
    args = ap.parse_args()
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", access_log=False)
    server = uvicorn.Server(config)

    def state() -> dict:
        with LOCK:
            return {"served": STATE["served"], "tokenize_ms": list(STATE["tokenize_ms"])}

    write_status_forever(server, args.status, state)
    server.run()


if __name__ == "__main__":
    main()
