#!/usr/bin/env python
"""Sample (c): a forward pass written as a Python loop of many tiny torch ops.

Each request is a small matrix of rows sent as a JSON body. Per request:

  preprocess  ``json.loads`` of the body and ``torch.tensor`` from the nested lists
  forward     ``RowLoopNet``: for every row, a handful of tiny ops (two 1-row matmuls, bias,
              tanh, relu, gate, reductions), then a per-step recurrence over the row scores;
              several hundred torch calls per request, each on a few dozen numbers, so the
              time is interpreter and dispatch overhead rather than arithmetic
  serialize   ``.tolist()`` of the scores and ``json.dumps`` of a small response

Everything runs in the main thread. Run from the repo root as ``python samples/python_loop.py``
or ``python -m samples.python_loop``; see ``--help`` and samples/README.md.
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
import random  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

from samples.common.runtime import (  # noqa: E402
    COMMON_EPILOG,
    ThroughputReporter,
    add_common_args,
    install_stop_handlers,
    run_inline,
    setup_torch,
    start_clock,
)


class RowLoopNet(nn.Module):
    """Row-at-a-time scoring with a small recurrence: the shape of research code that was never
    vectorized. Every op touches a few dozen numbers; the loop, not the math, is the cost."""

    def __init__(self, width: int, rows: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width, width) / width**0.5)
        self.bias = nn.Parameter(torch.zeros(width))
        self.weight2 = nn.Parameter(torch.randn(width, width) / width**0.5)
        self.gates = nn.Parameter(torch.randn(rows, width) * 0.5)
        self.decay = 0.9

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = []
        for i in range(x.shape[0]):
            row = x[i]
            h = row @ self.weight
            h = torch.tanh(h + self.bias)
            h = torch.relu(h @ self.weight2)
            h = h * self.gates[i % self.gates.shape[0]]
            scores.append(h.sum() / (h.norm() + 1.0))
        # a running, decayed maximum over the row scores, one step at a time
        state = torch.zeros(())
        out = []
        for s in scores:
            state = torch.maximum(state * self.decay, s)
            out.append(state)
        return torch.stack(out)


def preprocess(body: str) -> torch.Tensor:
    """Request body ``{"id": ..., "rows": [[float, ...], ...]}`` to a float32 tensor."""
    request = json.loads(body)
    return torch.tensor(request["rows"], dtype=torch.float32)


def serialize_response(rid: int, out: torch.Tensor) -> str:
    values = out.tolist()
    body = {
        "id": f"req-{rid:08d}",
        "scores": [round(v, 6) for v in values],
        "best": max(range(len(values)), key=values.__getitem__),
    }
    return json.dumps(body)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python_loop",
        description=(
            "Sample inference workload whose forward pass is a Python loop of many tiny torch\n"
            "ops (hundreds per request). Expected infertop picture: forward ~85-90% with a\n"
            "deep, wide flame of Python frames under the module; a little preprocess\n"
            "(json.loads + torch.tensor) and serialize (json.dumps).\n"
        ),
        epilog=COMMON_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_args(p)
    w = p.add_argument_group("workload")
    w.add_argument("--rows", type=int, default=64, help="rows per request (default 64)")
    w.add_argument("--width", type=int, default=16, help="numbers per row (default 16)")
    args = p.parse_args(argv)
    if args.rows < 1 or args.width < 1:
        p.error("--rows and --width must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    stop = install_stop_handlers()
    args = parse_args(argv)
    setup_torch(args.threads, args.seed)
    rng = random.Random(args.seed)
    model = RowLoopNet(args.width, args.rows)
    model.eval()
    # a pool of request bodies, made up front so that making them costs nothing per request
    bodies = [
        json.dumps(
            {
                "id": i,
                "rows": [
                    [round(rng.uniform(-1.0, 1.0), 5) for _ in range(args.width)]
                    for _ in range(args.rows)
                ],
            }
        )
        for i in range(16)
    ]
    clock = start_clock(args.truth, background=False)
    served = 0

    def handle_one() -> None:
        nonlocal served
        body = bodies[served % len(bodies)]
        with clock.stage("preprocess"):
            x = preprocess(body)
        with clock.stage("forward"):
            out = model(x)
        with clock.stage("serialize"):
            serialize_response(served, out)
        served += 1
        clock.count()

    with torch.inference_mode():
        run_inline(
            stop,
            args.duration,
            ThroughputReporter(lambda: clock.requests),
            handle_one,
            clock,
            args.truth,
        )
    clock.close(args.truth)
    return 0


if __name__ == "__main__":
    sys.exit(main())
