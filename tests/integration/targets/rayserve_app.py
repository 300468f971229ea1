"""A Ray Serve deployment as someone would write one for a model, for the default-latency test
(Python >= 3.12 with ray[serve], torch and transformers; not a test itself).

A one-node Ray cluster (2 CPUs, a small object store, no dashboard) and one deployment,
``Embedder``, behind Serve's HTTP proxy on ``--port``: its ``__call__`` takes the starlette
``Request``, tokenizes the posted text with a real Hugging Face fast tokenizer (a word-level
vocabulary built here, nothing downloaded), runs a small torch model (``Encoder``: an embedding
and an MLP, a few milliseconds a call) and returns a dict, which Serve writes as JSON. The
replica (its own process, ``ray::ServeReplica:...``) rewrites ``--status`` every 0.2 s: its pid,
the requests it served and its own clock of each tokenizer and model call (ms, perf_counter
around each) -- the truth the agent's default timing is held to. The driver stays up until
killed, then shuts Serve and Ray down.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time

import ray
import torch
from ray import serve
from starlette.requests import Request
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

WORDS = [f"w{i}" for i in range(2000)]


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"[UNK]": 0, "[PAD]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


class Encoder(torch.nn.Module):
    def __init__(self, vocab: int, dim: int = 256) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mlp = torch.nn.Sequential(
            *[torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim)) for _ in range(4)]
        )  # fmt: skip

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(input_ids)
        for block in self.mlp:
            h = h + block(h)
        return h.mean(dim=1)


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
class Embedder:
    def __init__(self, status: str) -> None:
        torch.set_num_threads(1)
        self.tokenizer = build_tokenizer()
        self.model = Encoder(len(WORDS) + 2).eval()
        self.lock = threading.Lock()
        self.state: dict = {"pid": os.getpid(), "served": 0, "tokenize_ms": [], "forward_ms": []}
        threading.Thread(target=self._write_status, args=(status,), daemon=True).start()

    def _write_status(self, path: str) -> None:
        while True:
            time.sleep(0.2)
            with self.lock:
                state = {k: list(v) if isinstance(v, list) else v for k, v in self.state.items()}
            tmp = path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"t": time.time(), **state}, fh)
            os.replace(tmp, path)

    async def __call__(self, request: Request) -> dict:
        body = await request.json()
        t0 = time.perf_counter()
        enc = self.tokenizer([body["text"]], padding=True, return_tensors="pt")
        t1 = time.perf_counter()
        with torch.inference_mode():
            vec = self.model(enc["input_ids"])
        t2 = time.perf_counter()
        with self.lock:
            self.state["served"] += 1
            self.state["tokenize_ms"].append(round((t1 - t0) * 1000.0, 4))
            self.state["forward_ms"].append(round((t2 - t1) * 1000.0, 4))
        return {"norm": float(vec.norm()), "tokens": int(enc["input_ids"].shape[1])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--status", required=True, help="the replica's status file")
    ap.add_argument("--ray-dir", help="Ray's session folder (its sockets: keep the path short)")
    ap.add_argument("--arm", metavar="PATH", help="arm the infertop agent in every Ray worker, "
                    "infertop importable from PATH (as docs/processes.md tells a user)")
    args = ap.parse_args()
    runtime_env = {}
    if args.arm:
        # a Ray worker's main thread runs Ray's task loop in C++ and never reaches a point
        # where an injected agent could start: it is armed when the worker starts instead
        runtime_env = {
            "env_vars": {"INFERTOP_AGENT": "1", "PYTHONPATH": args.arm},
            "worker_process_setup_hook": "infertop.agent.arm_from_env",
        }
    # Ray starts its workers at nice 15 (the raylet's default): beside any other work on a
    # small machine its replica and proxy then miss Serve's own readiness deadlines
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(
        num_cpus=2, object_store_memory=80 * 1024 * 1024, include_dashboard=False,
        log_to_driver=False, configure_logging=False, runtime_env=runtime_env,
        _temp_dir=args.ray_dir,
    )  # fmt: skip
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    serve.run(Embedder.bind(args.status), name="embed", route_prefix="/embed")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print("serving", flush=True)
    done.wait()
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
