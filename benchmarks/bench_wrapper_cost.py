"""What the agent's timer costs per call (not collected by pytest): each kind of timed entry
point called in a loop, plain and timed, in one process pinned to one core; the timer is the
one the agent uses on this Python (``wrappers.py`` before 3.12, ``sys.monitoring`` from it).

- ``function``   a module's function (``json.dumps``, a ``--stage`` rule's function);
- ``method``     a class's method through its instance (a tokenizer's ``__call__``);
- ``nested``     the same function called 40 times inside an outer call of its stage: each
                 inner call is merged into the outer one (a sub-call, ``encode`` in ``__call__``);
- ``forward``    a root torch module's call (``model(x)``: its batch size read once a call);
- ``request``    an ``async def`` entry point awaited (an ASGI app's ``__call__``, with its
                 HTTP filter and request id);
- ``wsgi``       a WSGI app called, its one-chunk body iterated and closed as a server does
                 (timed until the close, by a wrapper on every Python);
- ``generate``   Hugging Face ``generate`` on a small random GPT-2 (greedy, 16 new tokens):
                 the generation tracker on its forwards, sent as prefill and decode.

Per row: the median over ``--rounds`` of ns per call (``time.thread_time``: this thread's CPU,
where every wrapper and callback runs), plain and timed, and their difference.

    .venv/bin/python benchmarks/bench_wrapper_cost.py [--rounds 7] [--calls 20000]
    .venv312/bin/python benchmarks/bench_wrapper_cost.py      # the monitor, for comparison
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from infertop.agent.payload.generation import _Generations, find_generation_codes  # noqa: E402
from infertop.agent.payload.monitor import _Monitor  # noqa: E402
from infertop.agent.payload.stages import _asgi_http, _wsgi_http, find_known_codes, find_model_codes  # noqa: E402
from infertop.agent.payload.wrappers import _Wrappers  # noqa: E402

TIMER = _Monitor if _Monitor.available() else _Wrappers


def encode(x):
    return x


def outer(x):
    for _ in range(40):
        encode(x)
    return x


class Tokenizer:
    def __call__(self, x):
        return x


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return x


async def app(scope, receive, send):
    return None


def wsgi_app(environ, start_response):
    return [b"ok"]


def _cpu_ns(fn, calls: int) -> float:
    t0 = time.thread_time_ns()
    fn(calls)
    return (time.thread_time_ns() - t0) / calls


def _loops(model, tok, gen_model, gen_args):
    x = torch.zeros(2, 4)
    payload = {"a": 1}
    scope = {"type": "http", "method": "GET", "path": "/"}

    def function(n):
        for _ in range(n):
            json.dumps(payload)

    def method(n):
        for _ in range(n):
            tok("a")

    def nested(n):
        for _ in range(n // 40):
            outer("a")

    def forward(n):
        for _ in range(n):
            model(x)

    def request(n):
        async def many():
            for _ in range(n):
                await app(scope, None, None)

        asyncio.run(many())

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "SCRIPT_NAME": ""}

    def wsgi(n):
        for _ in range(n):
            body = wsgi_app(environ, None)
            for _chunk in body:
                pass
            close = getattr(body, "close", None)
            if close is not None:
                close()

    def generate(n):
        for _ in range(n):
            gen_model.generate(*gen_args[0], **gen_args[1])

    return {"function": function, "method": method, "nested": nested, "forward": forward,
            "request": request, "wsgi": wsgi, "generate": generate}  # fmt: skip


def _timer(spans):
    models = find_model_codes()
    gen = _Generations(find_generation_codes((), models))
    codes = {c: s for c, (s, _f) in find_known_codes(models).items()}
    codes.update({encode.__code__: "preprocess", outer.__code__: "preprocess",
                  Tokenizer.__call__.__code__: "preprocess", app.__code__: "request"})  # fmt: skip
    push = lambda *a: spans.append(a)  # noqa: E731
    side = _Wrappers({wsgi_app.__code__: "request"}, push, filters={wsgi_app.__code__: _wsgi_http},
                     bodies={wsgi_app.__code__})  # fmt: skip
    return TIMER(codes, push, filters={app.__code__: _asgi_http}, generations=gen), side


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--generate-calls", type=int, default=8)
    ap.add_argument("--core", type=int, default=0)
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    from transformers.utils import logging as hf_logging

    from samples.common.hf_generate import build_model

    hf_logging.set_verbosity_error()
    gen_model = build_model(2000, 128, 2, 4, 64)
    ids = torch.randint(2, 2000, (2, 32))
    gen_kw = {"attention_mask": torch.ones_like(ids), "max_new_tokens": 16, "min_new_tokens": 16,
              "do_sample": False, "pad_token_id": 0}  # fmt: skip
    gen_args = ((ids,), gen_kw)
    model, tok = Net().eval(), Tokenizer()
    loops = _loops(model, tok, gen_model, gen_args)
    results: dict[str, dict[str, list[float]]] = {k: {"plain": [], "timed": []} for k in loops}
    with torch.inference_mode():
        for name, fn in loops.items():  # warm
            fn(2 if name == "generate" else 200)
        for _ in range(args.rounds):
            for name, fn in loops.items():
                n = args.generate_calls if name == "generate" else args.calls
                results[name]["plain"].append(_cpu_ns(fn, n))
                spans: list = []
                timer, side = _timer(spans)
                timer.install()
                side.install()
                try:
                    results[name]["timed"].append(_cpu_ns(fn, n))
                finally:
                    side.uninstall()
                    timer.uninstall()
                assert spans, name  # the calls were timed
    print(f"Python {sys.version.split()[0]}, timer {TIMER.__name__}, {args.rounds} rounds, medians (ns per call)")
    print(f"{'entry point':<12} {'plain':>12} {'timed':>12} {'cost':>10}")
    for name, r in results.items():
        plain, timed = statistics.median(r["plain"]), statistics.median(r["timed"])
        print(f"{name:<12} {plain:>12,.0f} {timed:>12,.0f} {timed - plain:>10,.0f}")


if __name__ == "__main__":
    main()
