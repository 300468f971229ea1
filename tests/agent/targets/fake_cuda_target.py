"""A target whose ``torch`` is a stand-in with PyTorch's CUDA memory-snapshot API and nothing
else (there is no GPU here), for the real agent's ``memory_snapshot`` and ``oom_snapshot`` paths
end to end (tests/agent/test_memory_snapshot_agent.py). Not a test itself.

The stand-in answers ``torch.cuda.memory._snapshot()`` with the fixture snapshot and logs each
``_record_memory_history`` call; the main thread counts iterations; SIGUSR1 calls the attached
out-of-memory observers as the allocator would (device 0, a 64 MiB request). ``--status``: JSON
every 0.05 s (iterations, the history calls, how many observers)."""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import sys
import time
import types


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--status", required=True)
    ap.add_argument("--fixture", required=True)
    args = ap.parse_args()
    with open(args.fixture, "rb") as fh:
        snap = pickle.load(fh)  # the test's own fixture
    history: list = []
    observers: list = []
    ooms = [0]

    def record(enabled="all", *rest, **kw):
        history.append([enabled, kw.get("max_entries")])

    torch = types.ModuleType("torch")
    torch.__version__ = "0.0+stand-in"
    torch.autograd = types.ModuleType("torch.autograd")
    torch._C = types.SimpleNamespace(
        _cuda_memorySnapshot=lambda *a: snap,
        _cuda_record_memory_history=lambda *a: None,
        _cuda_attach_out_of_memory_observer=observers.append,
    )
    torch.cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        memory=types.SimpleNamespace(_record_memory_history=record, _snapshot=lambda: snap),
    )
    sys.modules["torch"] = torch

    def oom(signum, frame):
        ooms[0] += 1
        for fn in list(observers):
            fn(0, 64 << 20, 12 << 20, 10 << 20)

    stop = []
    signal.signal(signal.SIGUSR1, oom)
    signal.signal(signal.SIGTERM, lambda s, f: stop.append(s))
    n = 0
    while not stop:
        n += 1
        status = {"t": time.time(), "main": n, "history": history, "observers": len(observers),
                  "ooms": ooms[0]}  # fmt: skip
        tmp = args.status + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(status, fh)
        os.replace(tmp, args.status)
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
