"""A torch CPU model called in a loop, for the agent's memory tests (not a test itself).

Each call of ``Model.forward`` allocates one float32 buffer of ``--mib`` MiB (kept alive until
the call's end) and a small output. ``--status`` is rewritten every 0.1 s with the call count.
SIGTERM ends it cleanly.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time

import torch


class Model(torch.nn.Module):
    def __init__(self, mib: int) -> None:
        super().__init__()
        self.rows = mib * 1024 * 1024 // (4 * 256)
        self.proj = torch.nn.Linear(256, 16)

    def forward(self, x):
        buf = torch.ones(self.rows, 256)  # mib MiB, alive until the call ends
        return self.proj(x) + buf[:1, :16]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--status", required=True)
    ap.add_argument("--mib", type=int, default=8)
    args = ap.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    torch.set_num_threads(1)
    model = Model(args.mib).eval()
    x = torch.randn(4, 256)
    calls = 0
    last = 0.0
    with torch.no_grad():
        while not stop.is_set():
            model(x)
            calls += 1
            time.sleep(0.005)
            now = time.monotonic()
            if now - last >= 0.1:
                last = now
                tmp = args.status + ".tmp"
                with open(tmp, "w") as fh:
                    json.dump({"t": time.time(), "pid": os.getpid(), "main": calls}, fh)
                os.replace(tmp, args.status)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
