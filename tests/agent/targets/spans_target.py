"""A target without torch for the span tests (runs on any Python >= 3.8; not a test itself).

Calls ``encode_batch`` (~5 ms of sleep) about 50 times a second and runs a
``with infertop.stage("serialize")`` block each iteration (when ``infertop`` is importable: put
the repository on PYTHONPATH). Writes ``--status`` every 0.1 s as JSON: iteration count, the
sys.monitoring tool registered under PROFILER_ID (Python >= 3.12) and whether an infertop span
sink is installed, and whether ``Server.handle`` is another object than the one the class was
made with (the agent's wrapper, before Python 3.12), so tests can check that detach left
nothing behind.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

try:
    import infertop.annotate as annotate
except ImportError:  # pragma: no cover - the tests put the repository on PYTHONPATH
    annotate = None


def encode_batch(items):
    time.sleep(0.005)
    return [str(i) for i in items]


class Server:
    def handle(self, items):
        return encode_batch(items)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--status", required=True)
    args = ap.parse_args()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    server = Server()
    handle = Server.__dict__["handle"]
    n = 0
    last = 0.0
    while not stopping:
        server.handle(range(8))
        if annotate is not None:
            with annotate.stage("serialize", request=n):
                json.dumps({"n": n, "items": list(range(50))})
        n += 1
        time.sleep(0.012)
        now = time.monotonic()
        if now - last >= 0.1:
            last = now
            mon = getattr(sys, "monitoring", None)
            status = {
                "t": time.time(),
                "n": n,
                "tool": mon.get_tool(mon.PROFILER_ID) if mon else None,
                "tools": [mon.get_tool(i) for i in range(6)] if mon else None,
                "sink": annotate is not None and annotate._sink is not None,
                "handle_wrapped": Server.__dict__["handle"] is not handle,
            }
            tmp = args.status + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(status, fh)
            os.replace(tmp, args.status)
    return 0


if __name__ == "__main__":
    sys.exit(main())
