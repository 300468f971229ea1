"""Real Hugging Face generation for the text-generation sample's ``--hf``: ``generate`` on a
GPT-2 with random weights (KV cache on) behind a fast tokenizer trained at start-up on the
bundled corpus. Nothing is downloaded.

``HfGenerator.serve_batch`` is one dynamic batch: tokenize the prompts (left-padded), one
``generate`` call for the whole batch, decode the new tokens, build the responses. Its truth
splits the call where the articles split it: ``prefill`` from the call's start until the first
new token is chosen (timed by a streamer, which ``generate`` hands each token as soon as it is
picked), ``decode`` the rest of the call.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import torch
from tokenizers import Tokenizer as RustTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from transformers.generation.streamers import BaseStreamer
from transformers.utils import logging as transformers_logging

from samples.common.truth import StageClock

# a random-weight model's advice (padding, generation config) is not the sample's output
transformers_logging.set_verbosity_error()

PAD, EOS = "<pad>", "<eos>"


def build_tokenizer(corpus: str, vocab_size: int = 2000) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on ``corpus`` here, wrapped as transformers wraps a model's."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    rust = RustTokenizer(models.BPE())
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    rust.train_from_iterator(corpus.splitlines(), trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=rust, pad_token=PAD, eos_token=EOS)
    tok.padding_side = "left"  # a decoder-only model continues from the prompt's end
    return tok


def build_model(vocab_size: int, d_model: int, layers: int, heads: int, context: int) -> GPT2LMHeadModel:
    cfg = GPT2Config(
        vocab_size=vocab_size, n_positions=context, n_embd=d_model, n_layer=layers, n_head=heads,
        bos_token_id=1, eos_token_id=1, pad_token_id=0,
    )  # fmt: skip
    return GPT2LMHeadModel(cfg).eval()


class _FirstToken(BaseStreamer):
    """When ``generate`` chose its first new token: it puts the prompt first, then each new
    token of the batch as soon as it is picked."""

    def __init__(self) -> None:
        self.puts = 0
        self.first = 0.0

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


class HfGenerator:
    def __init__(self, corpus: str, new_tokens: int, temperature: float, top_k: int,
                 d_model: int, layers: int, heads: int, max_prompt_tokens: int) -> None:  # fmt: skip
        self.tokenizer = build_tokenizer(corpus)
        self.max_prompt_tokens = max_prompt_tokens
        self.model = build_model(
            len(self.tokenizer), d_model, layers, heads, max_prompt_tokens + new_tokens + 8
        )
        self.new_tokens = new_tokens
        self.temperature = temperature
        self.top_k = top_k
        self.name = f"gpt2-random-{layers}x{d_model}"

    def serve_batch(self, prompts: Sequence[str], clock: StageClock) -> list[dict]:
        """One batch end to end; each stage's seconds go to ``clock``."""
        with clock.stage("preprocess"):
            enc = self.tokenizer(
                list(prompts), padding=True, truncation=True,
                max_length=self.max_prompt_tokens, return_tensors="pt",
            )  # fmt: skip
        streamer = _FirstToken()
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(
                **enc, max_new_tokens=self.new_tokens, min_new_tokens=self.new_tokens,
                do_sample=True, temperature=self.temperature, top_k=self.top_k,
                use_cache=True, pad_token_id=self.tokenizer.pad_token_id, streamer=streamer,
            )  # fmt: skip
        end = time.perf_counter()
        first = streamer.first or end
        clock.add("prefill", first - start)
        clock.add("decode", end - first)
        batch, prompt_len = enc["input_ids"].shape
        new_len = out.shape[1] - prompt_len
        cfg = self.model.config
        # what the cache holds at the end, from the model's shape: keys and values of every
        # layer for every position fed (the prompt and all new tokens but the last), float32
        kv = cfg.n_layer * 2 * batch * (prompt_len + new_len - 1) * cfg.n_embd * 4
        clock.call("generation", {
            "t": time.time() - (time.perf_counter() - start), "ttft_ms": (first - start) * 1e3,
            "total_ms": (end - start) * 1e3,
            "tpot_ms": (end - first) * 1e3 / (new_len - 1) if new_len > 1 else None,
            "batch": int(batch), "prompt_tokens": int(prompt_len), "new_tokens": int(new_len),
            "kv_bytes": int(kv),
        })  # fmt: skip
        with clock.stage("postprocess"):
            prompt_len = enc["input_ids"].shape[1]
            new = out[:, prompt_len:]
            texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
            lengths = enc["attention_mask"].sum(dim=1).tolist()
            responses = [
                {
                    "object": "text_completion",
                    "model": self.name,
                    "choices": [{"index": 0, "text": text, "token_ids": new[b].tolist()}],
                    "usage": {"prompt_tokens": int(lengths[b]), "completion_tokens": int(new.shape[1])},
                    "timings_ms": {"ttft": round((first - start) * 1e3, 3), "total": round((end - start) * 1e3, 3)},
                }
                for b, text in enumerate(texts)
            ]
        return responses
