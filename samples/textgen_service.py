#!/usr/bin/env python
"""Sample (a): a small text-generation service with dynamic batching.

Client threads submit prompts into a queue and wait for their replies; one batcher thread
takes up to --max-batch requests (waiting at most --batch-timeout-ms after the first) and
runs them through the pipeline:

  preprocess   pure-Python BPE encode of every prompt, left-pad, build the id tensor
  forward      a 2-layer decoder-only transformer LM (nn.TransformerEncoderLayer + causal
               mask): one prefill call, then one incremental call per new token
  postprocess  temperature / top-k / softmax / torch.multinomial per step, then decode the
               tokens and build an OpenAI-style response with per-token logprobs
  serialize    json.dumps of each response

Run from the repo root as ``python samples/textgen_service.py`` or
``python -m samples.textgen_service``. See ``--help`` and samples/README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

if __name__ == "__main__":  # catch SIGINT/SIGTERM already while torch is being imported
    from samples.common.runtime import install_stop_handlers

    install_stop_handlers()

import argparse  # noqa: E402
import json  # noqa: E402
import queue  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402, N812
from torch import nn  # noqa: E402

from samples.common.annotated import annotated  # noqa: E402
from samples.common.runtime import (  # noqa: E402
    COMMON_EPILOG,
    ThroughputReporter,
    add_common_args,
    install_stop_handlers,
    serve_until_stopped,
    setup_torch,
    start_clock,
)
from samples.common.tokenizer import CORPUS_PATH, Tokenizer  # noqa: E402
from samples.common.truth import StageClock  # noqa: E402


# --------------------------------------------------------------------------- requests
@dataclass
class Request:
    rid: int
    prompt: str
    submitted: float = field(default_factory=time.perf_counter)
    done: threading.Event = field(default_factory=threading.Event)
    body: str = ""


def make_prompt(rng: random.Random, words: list[str], min_words: int, max_words: int) -> str:
    """A few random 'sentences' of corpus words."""
    out: list[str] = []
    remaining = rng.randint(min_words, max_words)
    while remaining > 0:
        n = min(remaining, rng.randint(5, 14))
        remaining -= n
        sent = [rng.choice(words) for _ in range(n)]
        sent[0] = sent[0].capitalize()
        out.append(" ".join(sent) + rng.choice((".", ".", ".", "?", "!")))
    return " ".join(out)


def client_loop(
    cid: int,
    requests: queue.Queue[Request],
    stop: threading.Event,
    words: list[str],
    args: argparse.Namespace,
) -> None:
    """Closed-loop client: submit, wait for the reply, respect the --rate cap, repeat."""
    rng = random.Random(args.seed * 1000 + cid)
    period = 1.0 / args.rate if args.rate > 0 else 0.0
    next_at = time.perf_counter()
    n = 0
    while not stop.is_set():
        if period:
            delay = next_at - time.perf_counter()
            if delay > 0 and stop.wait(delay):
                return
            next_at = max(next_at + period, time.perf_counter() - period)
        req = Request(rid=cid * 10_000_000 + n, prompt=make_prompt(rng, words, *args.prompt_words))
        n += 1
        requests.put(req)
        req.done.wait()  # set by the batcher, or by the shutdown drain


# --------------------------------------------------------------------------- model
class GenState:
    """Per-batch generation state: key padding, next positions, per-layer key/value cache."""

    def __init__(self, pad: torch.Tensor) -> None:
        self.key_pad = pad  # (B, T) bool, True where a position is padding
        self.keys: list[torch.Tensor] = []  # per layer (B, H, T, head_dim)
        self.values: list[torch.Tensor] = []
        self.next_pos: torch.Tensor | None = None


class TinyCausalLM(nn.Module):
    """Decoder-only LM built from ``nn.TransformerEncoderLayer`` (pre-norm) + causal mask.

    The first call for a batch (empty state) runs the whole prompt through the layers and
    fills a key/value cache; later calls take one new token per row and attend over the
    cache, as incremental generation does.
    """

    def __init__(self, vocab_size: int, args: argparse.Namespace) -> None:
        super().__init__()
        d = args.d_model
        self.n_heads = args.heads
        self.embed = nn.Embedding(vocab_size, d)
        self.pos = nn.Embedding(args.max_positions, d)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                d, args.heads, args.d_ff, dropout=0.0, batch_first=True, norm_first=True
            )
            for _ in range(args.layers)
        )
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab_size, bias=False)
        self.lm_head.weight = self.embed.weight  # tied embeddings
        # GPT-2-style small init: an untrained model then spreads its predictions over the
        # vocabulary instead of echoing the last token with certainty
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, ids: torch.Tensor, state: GenState) -> torch.Tensor:
        if not state.keys:
            return self._prefill(ids, state)
        return self._step(ids, state)

    def _kv(
        self, layer: nn.TransformerEncoderLayer, h: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Project normalized inputs ``h`` (B, T, D) to per-head keys and values."""
        attn = layer.self_attn
        d = h.shape[-1]
        kv = F.linear(h, attn.in_proj_weight[d:], attn.in_proj_bias[d:])
        b, t, _ = kv.shape
        kv = kv.view(b, t, 2, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        return kv[0], kv[1]

    def _prefill(self, ids: torch.Tensor, state: GenState) -> torch.Tensor:
        pad = state.key_pad
        b, t = ids.shape
        real = ~pad
        pos = (real.long().cumsum(1) - 1).clamp_(min=0)
        state.next_pos = pos[:, -1] + 1
        x = self.embed(ids) + self.pos(pos)
        # Mask: causal, plus padded keys; every position may always see itself so that
        # all-padding rows stay finite.
        causal = torch.ones(t, t, dtype=torch.bool).triu_(1)
        mask = causal.unsqueeze(0) | pad.unsqueeze(1)
        mask &= ~torch.eye(t, dtype=torch.bool).unsqueeze(0)
        mask = mask.repeat_interleave(self.n_heads, dim=0)  # (B*H, T, T)
        for layer in self.layers:
            k, v = self._kv(layer, layer.norm1(x))
            state.keys.append(k)
            state.values.append(v)
            x = layer(x, src_mask=mask)
        return self.lm_head(self.norm(x[:, -1]))

    def _step(self, ids: torch.Tensor, state: GenState) -> torch.Tensor:
        """One new token per row (ids: (B, 1)) against the key/value cache."""
        b = ids.shape[0]
        state.key_pad = torch.cat([state.key_pad, state.key_pad.new_zeros(ids.shape)], 1)
        visible = (~state.key_pad).view(b, 1, 1, -1)
        x = self.embed(ids) + self.pos(state.next_pos).unsqueeze(1)
        state.next_pos = state.next_pos + 1
        d = x.shape[-1]
        heads = self.n_heads
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            qkv = F.linear(layer.norm1(x), attn.in_proj_weight, attn.in_proj_bias)
            q, k, v = qkv.view(b, 1, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            keys = torch.cat([state.keys[i], k], 2)
            values = torch.cat([state.values[i], v], 2)
            state.keys[i], state.values[i] = keys, values
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)
            x = x + attn.out_proj(o.transpose(1, 2).reshape(b, 1, d))
            x = x + layer.linear2(layer.activation(layer.linear1(layer.norm2(x))))
        return self.lm_head(self.norm(x[:, -1]))


def build_model(vocab_size: int, args: argparse.Namespace) -> TinyCausalLM:
    model = TinyCausalLM(vocab_size, args)
    model.eval()
    return model


# --------------------------------------------------------------------------- pipeline
Steps = tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]


def tokenize_batch(
    tokenizer: Tokenizer, prompts: list[str], max_tokens: int
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Encode and left-pad the prompts; returns (ids, padding mask, prompt lengths)."""
    rows, lengths = tokenizer.encode_batch(prompts, max_length=max_tokens)
    ids = torch.tensor(rows, dtype=torch.long)
    return ids, ids == tokenizer.pad_id, lengths


def postprocess_logits(
    logits: torch.Tensor, temperature: float, top_k: int, n_special: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Temperature-scale, forbid the special tokens (the last ``n_special`` ids), keep top-k.

    Returns ``(scaled, top_vals, top_idx)``; ``top_idx`` is None when no top-k applies.
    """
    scaled = logits / temperature
    scaled[:, -n_special:] = float("-inf")
    if 0 < top_k < scaled.shape[-1]:
        vals, idx = scaled.topk(top_k, dim=-1)
        return scaled, vals, idx
    return scaled, scaled, None


def sample_next_token(
    logits: torch.Tensor, args: argparse.Namespace, n_special: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One sampling step: returns (next ids (B,1), their logprobs, top ids, top logprobs)."""
    scaled, vals, idx = postprocess_logits(logits, args.temperature, args.top_k, n_special)
    probs = torch.softmax(vals, dim=-1)
    choice = torch.multinomial(probs, 1, generator=gen)
    nxt = idx.gather(-1, choice) if idx is not None else choice
    logp = torch.log_softmax(scaled, dim=-1)
    top_lp, top_ids = logp.topk(args.top_logprobs, dim=-1)
    chosen = logp.gather(-1, nxt).squeeze(-1)
    return nxt, chosen, top_ids, top_lp


def generate(
    model: TinyCausalLM,
    ids: torch.Tensor,
    pad: torch.Tensor,
    args: argparse.Namespace,
    n_special: int,
    gen: torch.Generator,
    clock: StageClock,
) -> Steps:
    """Prefill, then --new-tokens steps of sample-then-extend; returns the per-step outputs."""
    steps_ids: list[torch.Tensor] = []
    steps_lp: list[torch.Tensor] = []
    steps_top_ids: list[torch.Tensor] = []
    steps_top_lp: list[torch.Tensor] = []
    state = GenState(pad)
    with torch.inference_mode():
        with clock.stage("forward"):
            logits = model(ids, state)
        for step in range(args.new_tokens):
            with clock.stage("postprocess"):
                nxt, chosen, top_ids, top_lp = sample_next_token(logits, args, n_special, gen)
            steps_ids.append(nxt)
            steps_lp.append(chosen)
            steps_top_ids.append(top_ids)
            steps_top_lp.append(top_lp)
            if step + 1 < args.new_tokens:
                with clock.stage("forward"):
                    logits = model(nxt, state)
    return steps_ids, steps_lp, steps_top_ids, steps_top_lp


def postprocess_outputs(
    tokenizer: Tokenizer,
    batch: list[Request],
    lengths: list[int],
    outs: Steps,
    timings: dict[str, float],
    model_name: str,
) -> list[dict]:
    """Turn per-step tensors into decoded text and OpenAI-style response dicts."""
    n_plain = tokenizer.pad_id  # ids below this are byte sequences; the rest are specials
    token_bytes = tokenizer.token_bytes
    steps_ids, steps_lp, steps_top_ids, steps_top_lp = outs
    token_ids = torch.cat(steps_ids, 1).tolist()  # (B, N)
    token_lp = torch.stack(steps_lp, 1).tolist()  # (B, N)
    top_ids = torch.stack(steps_top_ids, 1).tolist()  # (B, N, K)
    top_lp = torch.stack(steps_top_lp, 1).tolist()  # (B, N, K)
    texts = tokenizer.decode_batch(token_ids)
    created = int(time.time())
    responses = []
    for b, req in enumerate(batch):
        content = []
        for t, tid in enumerate(token_ids[b]):
            tok = tokenizer.decode_token(tid)
            content.append(
                {
                    "token": tok,
                    "id": tid,
                    "logprob": token_lp[b][t],
                    "bytes": list(token_bytes[tid]) if tid < n_plain else [],
                    "top_logprobs": [
                        {
                            "token": tokenizer.decode_token(alt),
                            "id": alt,
                            "logprob": alt_lp,
                            "bytes": list(token_bytes[alt]) if alt < n_plain else [],
                        }
                        for alt, alt_lp in zip(top_ids[b][t], top_lp[b][t])
                    ],
                }
            )
        n_out = len(token_ids[b])
        responses.append(
            {
                "id": f"cmpl-{req.rid:010d}",
                "object": "text_completion",
                "created": created,
                "model": model_name,
                "choices": [
                    {
                        "index": 0,
                        "text": texts[b],
                        "finish_reason": "length",
                        "token_ids": token_ids[b],
                        "logprobs": {"content": content},
                    }
                ],
                "usage": {
                    "prompt_tokens": lengths[b],
                    "completion_tokens": n_out,
                    "total_tokens": lengths[b] + n_out,
                },
                "timings_ms": {
                    "queue": round((timings["start"] - req.submitted) * 1e3, 3),
                    **{k: round(v * 1e3, 3) for k, v in timings.items() if k != "start"},
                },
            }
        )
    return responses


class Batcher:
    """Owns the model and tokenizer; collects batches from the queue and serves them."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        model: TinyCausalLM,
        args: argparse.Namespace,
        clock: StageClock,
    ) -> None:
        self.tokenizer = tokenizer
        self.model = model
        self.args = args
        self.clock = clock
        self.gen = torch.Generator().manual_seed(args.seed)
        self.n_special = tokenizer.vocab_size - tokenizer.pad_id
        self.model_name = f"tiny-bpe-lm-{args.layers}x{args.d_model}"
        self.hf = None  # --hf: an HfGenerator serves the batches instead


    def collect(self, requests: queue.Queue[Request], stop: threading.Event) -> list[Request]:
        """Block for the first request (checking ``stop``), then gather more until the batch
        is full or --batch-timeout-ms has passed since the first arrived."""
        while True:
            try:
                first = requests.get(timeout=0.1)
                break
            except queue.Empty:
                if stop.is_set():
                    return []
        batch = [first]
        deadline = time.perf_counter() + self.args.batch_timeout_ms / 1e3
        while len(batch) < self.args.max_batch:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                break
            try:
                batch.append(requests.get(timeout=remaining))
            except queue.Empty:
                break
        return batch

    def serve(self, batch: list[Request]) -> None:
        clock = self.clock
        if self.hf is not None:
            responses = self.hf.serve_batch([r.prompt for r in batch], clock)
            self._send(batch, responses)
            return
        start = time.perf_counter()
        with clock.stage("preprocess"):
            ids, pad, lengths = tokenize_batch(
                self.tokenizer, [r.prompt for r in batch], self.args.max_prompt_tokens
            )
        t_pre = time.perf_counter()
        outs = generate(self.model, ids, pad, self.args, self.n_special, self.gen, clock)
        t_gen = time.perf_counter()
        timings = {"start": start, "preprocess": t_pre - start, "generate": t_gen - t_pre}
        with clock.stage("postprocess"):
            responses = postprocess_outputs(
                self.tokenizer, batch, lengths, outs, timings, self.model_name
            )
        self._send(batch, responses)

    def _send(self, batch: list[Request], responses: list[dict]) -> None:
        clock = self.clock
        indent = self.args.indent or None
        for req, resp in zip(batch, responses):
            with clock.stage("serialize"):
                req.body = json.dumps(resp, indent=indent)
        for req in batch:
            req.done.set()
        clock.count(len(batch))

    def run(self, requests: queue.Queue[Request], stop: threading.Event) -> None:
        while not stop.is_set():
            with self.clock.stage("queue"):
                batch = self.collect(requests, stop)
            if batch:
                self.serve(batch)


def drain(requests: queue.Queue[Request]) -> None:
    """Answer every request still queued with an empty body (used at shutdown)."""
    while True:
        try:
            req = requests.get_nowait()
        except queue.Empty:
            return
        req.done.set()


# --------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="textgen_service",
        description=(
            "Sample inference workload: a dynamically batched text-generation service\n"
            "(pure-Python BPE tokenizer, tiny transformer LM, top-k sampling, JSON\n"
            "responses). Expected infertop picture with defaults: forward ~50-60%, preprocess\n"
            "~15-20%, postprocess and serialize ~10% each; with --slow-tokenizer preprocess\n"
            "dominates.\n"
        ),
        epilog=COMMON_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_args(p)
    s = p.add_argument_group("service")
    s.add_argument("--clients", type=int, default=4, help="client threads (default 4)")
    s.add_argument(
        "--rate",
        type=float,
        default=50.0,
        help="max requests/s per client; each client also waits for its reply (default 50)",
    )
    s.add_argument("--max-batch", type=int, default=8, help="largest batch (default 8)")
    s.add_argument(
        "--batch-timeout-ms",
        type=float,
        default=5.0,
        help="how long to wait for more requests after the first of a batch (default 5)",
    )
    s.add_argument(
        "--prompt-words",
        type=int,
        nargs=2,
        default=(100, 160),
        metavar=("MIN", "MAX"),
        help="prompt length range in words (default 100 160, about 230-370 tokens)",
    )
    s.add_argument(
        "--slow-tokenizer",
        action="store_true",
        help="use the deliberately naive encoder so that preprocess dominates",
    )
    s.add_argument(
        "--fast-tokenizer",
        action="store_true",
        help="encode with Hugging Face's Rust `tokenizers` (trained here on the corpus, "
        "parallelism on): the batch is encoded on native threads while the batcher waits with "
        "the GIL released, as with most production tokenizers",
    )
    s.add_argument(
        "--context-repeat",
        type=int,
        default=4,
        help="with --fast-tokenizer: each prompt is encoded with this many copies of itself as "
        "context, so that the native encode is a real share (default 4)",
    )
    s.add_argument(
        "--annotate",
        action="store_true",
        help="also mark every stage with infertop.stage(NAME): an attached infertop agent then "
        "times each stage call on any Python (as in a service annotated by hand)",
    )
    s.add_argument(
        "--indent",
        type=int,
        default=2,
        help="JSON indent of responses; 0 for compact output (default 2, pretty-printed)",
    )
    s.add_argument(
        "--hf",
        action="store_true",
        help="serve with real Hugging Face generate: a random-weight GPT-2 (KV cache on) behind "
        "a fast tokenizer trained here on the bundled corpus; one generate call per batch "
        "(its truth: prefill until the first new token is chosen, then decode)",
    )
    m = p.add_argument_group("model and sampling")
    m.add_argument("--new-tokens", type=int, default=16, help="tokens generated per request (16)")
    m.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (0.8)")
    m.add_argument("--top-k", type=int, default=50, help="top-k filter before sampling (50)")
    m.add_argument(
        "--top-logprobs",
        type=int,
        default=8,
        help="alternatives reported per generated token in the response (default 8)",
    )
    m.add_argument("--d-model", type=int, default=128, help="model width (128)")
    m.add_argument("--layers", type=int, default=2, help="transformer layers (2)")
    m.add_argument("--heads", type=int, default=4, help="attention heads (4)")
    m.add_argument("--d-ff", type=int, default=256, help="feed-forward width (256)")
    m.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=128,
        help="context window: prompts keep their last N tokens (default 128)",
    )
    args = p.parse_args(argv)
    args.max_positions = args.max_prompt_tokens + args.new_tokens + 1
    if min(args.new_tokens, args.max_batch, args.clients, args.max_prompt_tokens) < 1:
        p.error("--new-tokens, --max-batch, --clients and --max-prompt-tokens must be at least 1")
    if not 1 <= args.prompt_words[0] <= args.prompt_words[1]:
        p.error("--prompt-words needs 1 <= MIN <= MAX")
    if args.temperature <= 0:
        p.error("--temperature must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    stop = install_stop_handlers()
    args = parse_args(argv)
    setup_torch(args.threads, args.seed)

    corpus = CORPUS_PATH.read_text(encoding="utf-8")
    if args.fast_tokenizer:
        from samples.common.fast_tokenizer import FastTokenizer

        tokenizer: Tokenizer = FastTokenizer(corpus, args.context_repeat)
    else:
        tokenizer = Tokenizer(corpus, slow=args.slow_tokenizer)
    args.top_logprobs = max(1, min(args.top_logprobs, tokenizer.vocab_size))
    words = sorted(set(re.findall(r"[A-Za-z]+(?:'[a-z]+)?|[0-9]+|[,;:]", corpus)))
    model = build_model(tokenizer.vocab_size, args)
    clock = start_clock(args.truth)
    batcher = Batcher(tokenizer, model, args, annotated(clock, args.annotate))
    if args.hf:
        from samples.common.hf_generate import HfGenerator

        batcher.hf = HfGenerator(
            corpus, args.new_tokens, args.temperature, args.top_k, args.d_model, args.layers,
            args.heads, args.max_prompt_tokens,
        )  # fmt: skip

    requests: queue.Queue[Request] = queue.Queue()
    threads = [threading.Thread(target=batcher.run, args=(requests, stop), name="batcher")]
    threads += [
        threading.Thread(
            target=client_loop, args=(i, requests, stop, words, args), name=f"client-{i}"
        )
        for i in range(args.clients)
    ]
    for t in threads:
        t.daemon = True
        t.start()

    serve_until_stopped(stop, args.duration, ThroughputReporter(lambda: clock.requests))
    stop.set()
    threads[0].join(timeout=5.0)  # the batcher finishes its batch and returns
    deadline = time.perf_counter() + 3.0
    for t in threads[1:]:  # release clients still waiting for a reply
        while t.is_alive() and time.perf_counter() < deadline:
            drain(requests)
            t.join(timeout=0.05)
    clock.close(args.truth)
    return 0


if __name__ == "__main__":
    sys.exit(main())
