"""A target whose model lives in a frozen heap, as in vLLM's processes and a Ray Serve replica
(``gc.freeze()`` after start-up): the collector lists none of it. Runs the model's forward in
a loop on its main thread and writes ``{"forwards": N}`` to ``--status`` every 0.1 s (not a
test itself)."""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import threading
import time

import torch


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(256, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class TinyModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer() for _ in range(4)])

    @torch.inference_mode()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class Engine:  # the framework's object holding the user's model
    def __init__(self) -> None:
        self.model = TinyModel()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--status", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    engine = Engine()
    gc.collect()
    gc.freeze()  # from here on gc.get_objects() lists none of the model
    x = torch.zeros(64, 256)
    n, last = 0, 0.0
    while not stop.is_set():
        engine.model(x)
        n += 1
        time.sleep(0.001)
        now = time.monotonic()
        if now - last > 0.1:
            last = now
            tmp = args.status + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"forwards": n, "frozen": gc.get_freeze_count()}, fh)
            os.replace(tmp, args.status)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
