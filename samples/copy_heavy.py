#!/usr/bin/env python
"""Sample (b): a request loop whose forward pass is dominated by tensor copies.

Each request is a small batch of feature rows sent as a JSON body. Per request:

  preprocess  ``json.loads`` of the body and ``torch.tensor`` from the nested lists
  forward     ``CopyHeavyNet``: broadcast the rows over a sequence, then a few rounds of dtype
              round-trips (float64 and back, half and back), ``.transpose().contiguous()``
              layout changes and defensive ``.clone()`` calls around two small matmuls
  serialize   ``.tolist()`` of a few output numbers and ``json.dumps`` of a small response

Everything runs in the main thread. Run from the repo root as ``python samples/copy_heavy.py``
or ``python -m samples.copy_heavy``; see ``--help`` and samples/README.md.
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


class CopyHeavyNet(nn.Module):
    """A model whose time goes into copies, not arithmetic.

    The patterns are the usual accidental ones: computing a reduction "safely" in float64,
    a float16 round-trip to mimic low-precision storage, transposes made contiguous for a
    kernel that wants the other layout, and defensive clones.
    """

    def __init__(self, d_model: int, seq_len: int, hidden: int, rounds: int, stride: int) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.rounds = rounds
        self.stride = stride
        self.pos = nn.Parameter(torch.randn(seq_len, d_model) * 0.02)
        self.down = nn.Linear(d_model, hidden)
        self.up = nn.Linear(hidden, d_model)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        # (B, D) -> (B, T, D): repeat materializes the broadcast
        x = feats.unsqueeze(1).repeat(1, self.seq_len, 1) + self.pos
        for _ in range(self.rounds):
            x64 = x.to(torch.float64)  # "be careful with precision"
            x64 = x64 - x64.mean(dim=-1, keepdim=True)
            x = x64.to(torch.float32)
            x = x.half().float()  # fp16 storage round-trip
            xt = x.transpose(1, 2).contiguous()  # (B, D, T) for a channels-first consumer
            x = xt.transpose(1, 2).contiguous()  # ... and back
            kept = x.clone()  # defensive copy before the "in-place" update
            z = self.down(x[:, :: self.stride])  # small matmul on every stride-th position
            upd = self.up(torch.relu(z)).repeat_interleave(self.stride, dim=1)
            x = kept + upd[:, : self.seq_len]
        return x.mean(dim=1)


def preprocess(body: str) -> torch.Tensor:
    """Request body ``{"id": ..., "rows": [[float, ...], ...]}`` to a float32 tensor."""
    request = json.loads(body)
    return torch.tensor(request["rows"], dtype=torch.float32)


def serialize_response(rid: int, out: torch.Tensor, n_values: int) -> str:
    body = {
        "id": f"req-{rid:08d}",
        "shape": list(out.shape),
        "norms": [round(v, 5) for v in out.norm(dim=-1).tolist()],
        "embedding": [round(v, 6) for v in out[0, :n_values].tolist()],
    }
    return json.dumps(body)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="copy_heavy",
        description=(
            "Sample inference workload whose forward pass is dominated by tensor copies\n"
            "(dtype round-trips, .contiguous() after .transpose(), .clone()) around small\n"
            "matmuls. Expected infertop picture: forward ~90%, a little preprocess\n"
            "(json.loads + torch.tensor) and serialize (json.dumps).\n"
        ),
        epilog=COMMON_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_args(p)
    w = p.add_argument_group("workload")
    w.add_argument("--batch", type=int, default=8, help="feature rows per request (default 8)")
    w.add_argument("--d-model", type=int, default=256, help="feature width (default 256)")
    w.add_argument("--seq-len", type=int, default=128, help="broadcast length (default 128)")
    w.add_argument("--hidden", type=int, default=64, help="matmul width (default 64)")
    w.add_argument("--rounds", type=int, default=3, help="copy rounds per forward (default 3)")
    w.add_argument(
        "--stride", type=int, default=16, help="matmul on every N-th position (default 16)"
    )
    w.add_argument(
        "--out-values", type=int, default=32, help="numbers echoed in each response (32)"
    )
    args = p.parse_args(argv)
    if min(args.batch, args.d_model, args.seq_len, args.hidden, args.rounds, args.stride) < 1:
        p.error("sizes must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    stop = install_stop_handlers()
    args = parse_args(argv)
    setup_torch(args.threads, args.seed)
    rng = random.Random(args.seed)
    model = CopyHeavyNet(args.d_model, args.seq_len, args.hidden, args.rounds, args.stride)
    model.eval()
    # a pool of request bodies, made up front so that making them costs nothing per request
    bodies = [
        json.dumps(
            {
                "id": i,
                "rows": [
                    [round(rng.gauss(0.0, 1.0), 6) for _ in range(args.d_model)]
                    for _ in range(args.batch)
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
            serialize_response(served, out, args.out_values)
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
