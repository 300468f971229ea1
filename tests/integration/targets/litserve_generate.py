"""A text-generation server on LitServe, as someone would write one: LitServe's API process
(uvicorn) and a spawned inference worker, dynamic batching of up to 8 requests within 30 ms,
and a ``predict`` that runs Hugging Face ``generate`` on the batch (a random-weight GPT-2 with
its KV cache, a BPE tokenizer trained at start; nothing downloaded). The worker keeps its own
timing of every generate call, one JSON line each in OWN_TIMINGS: its start (unix s), the time
to its first new token (a streamer), its total, its batch and prompt length, its new tokens,
and the bytes its cache holds from the model's shape.

    python litserve_generate.py PORT OWN_TIMINGS
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import litserve as ls

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

NEW_TOKENS = 12


class Streamer:
    """``generate`` puts the prompt first, then each new token as soon as it is chosen."""

    def __init__(self) -> None:
        self.puts, self.first = 0, 0.0

    def put(self, value) -> None:  # noqa: ANN001
        self.puts += 1
        if self.puts == 2:
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


class GenerateAPI(ls.LitAPI):
    def __init__(self, own: str, **kw) -> None:  # noqa: ANN003
        super().__init__(**kw)
        self.own = own

    def setup(self, device):  # noqa: ANN001
        import torch
        from transformers.utils import logging as hf_logging

        from samples.common.hf_generate import build_model, build_tokenizer
        from samples.common.tokenizer import CORPUS_PATH

        hf_logging.set_verbosity_error()
        torch.set_num_threads(1)
        self.torch = torch
        self.tok = build_tokenizer(Path(CORPUS_PATH).read_text(encoding="utf-8"))
        self.model = build_model(len(self.tok), 96, 2, 4, 96)
        self.log = open(self.own, "a", buffering=1)  # noqa: SIM115 - the worker's life

    def decode_request(self, request):  # noqa: ANN001
        return request["prompt"]

    def predict(self, prompts):  # noqa: ANN001
        enc = self.tok(list(prompts), padding=True, truncation=True, max_length=64, return_tensors="pt")
        streamer = Streamer()
        start_wall, start = time.time(), time.perf_counter()
        with self.torch.inference_mode():
            out = self.model.generate(
                **enc, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                pad_token_id=self.tok.pad_token_id, streamer=streamer,
            )  # fmt: skip
        end = time.perf_counter()
        batch, prompt = enc["input_ids"].shape
        new = out.shape[1] - prompt
        cfg = self.model.config
        self.log.write(json.dumps({
            "t": start_wall, "ttft_ms": (streamer.first - start) * 1e3, "total_ms": (end - start) * 1e3,
            "tpot_ms": (end - streamer.first) * 1e3 / (new - 1), "batch": int(batch),
            "prompt_tokens": int(prompt), "new_tokens": int(new),
            "kv_bytes": cfg.n_layer * 2 * int(batch) * (int(prompt) + int(new) - 1) * cfg.n_embd * 4,
        }) + "\n")  # fmt: skip
        texts = self.tok.batch_decode(out[:, prompt:], skip_special_tokens=True)
        return texts

    def encode_response(self, output):  # noqa: ANN001
        return {"text": output}


if __name__ == "__main__":
    api = GenerateAPI(sys.argv[2], max_batch_size=8, batch_timeout=0.03)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1)
    server.run(port=int(sys.argv[1]), generate_client_file=False)
