"""A target for the wrappers' timer (Python < 3.12, torch; not a test itself): a loop of
``preprocess`` (two ``tokenize`` calls of 2 ms each, both named by the tests' ``--stage`` rule:
nested, so one call), a model's forward (a root module with sub-modules, batch 3) and
``json.dumps``, about 40 times a second.

Writes ``--status`` every 0.1 s as JSON: iterations, and which of the objects the agent may
wrap are not the ones the target started with (``changed``: its functions in this module's
dictionary, the model class's ``forward``, ``json.dumps`` in ``json`` and in this module,
imported by name), whether ``sys.modules`` holds exactly the modules it held once warm, and
the process's Python threads."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from json import dumps

import torch


def tokenize(text):
    time.sleep(0.002)
    return [ord(c) % 7 for c in text]


def preprocess(text):
    ids = tokenize(text) + tokenize(text[::-1])
    return torch.tensor([ids[:6]] * 3, dtype=torch.float32)


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())

    def forward(self, x):
        return self.blocks(x)


def watched(model):
    """(place, object) of everything the agent may replace while attached."""
    mod = sys.modules[__name__]
    return [
        ("tokenize", mod.__dict__["tokenize"]), ("preprocess", mod.__dict__["preprocess"]),
        ("Net.forward", Net.__dict__["forward"]), ("Block.forward", Block.__dict__["forward"]),
        ("json.dumps", json.__dict__["dumps"]), ("dumps", mod.__dict__["dumps"]),
        ("Module.__call__", torch.nn.Module.__dict__["__call__"]), ("model", model),
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--status", required=True)
    args = ap.parse_args()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    torch.set_num_threads(1)
    model = Net().eval()
    start = watched(model)
    n, last, modules = 0, 0.0, None
    with torch.inference_mode():
        while not stopping:
            x = preprocess("hello world")
            y = model(x)
            dumps({"n": n, "y": y.sum().item()})
            n += 1
            time.sleep(0.02)
            now = time.monotonic()
            if now - last < 0.1:
                continue
            last = now
            if modules is None and n >= 5:
                modules = set(sys.modules)
            status = {
                "t": time.time(),
                "n": n,
                "changed": [name for (name, a), (_, b) in zip(start, watched(model)) if a is not b],
                "modules_same": modules is not None and set(sys.modules) == modules,
                "extra_modules": sorted(set(sys.modules) - modules) if modules else [],
                "threads": sorted(t.name for t in threading.enumerate()),
            }
            tmp = args.status + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(status, fh)
            os.replace(tmp, args.status)
    return 0


if __name__ == "__main__":
    sys.exit(main())
