"""A CPU-bound target without torch for benchmarks/bench_tail_cost.py (Python >= 3.8).

Each iteration: ``encode`` (~2 ms of pure-Python string work that leaves reference cycles, so
the collector runs often: the GC callback's worst case) and ``forward`` (~3 ms of arithmetic).
With ``--loop``, an idle asyncio event loop runs on a second thread (the heartbeat's cost).
Writes ``iterations`` and its time to ``--counter`` every 0.2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time


class Token:
    def __init__(self, text):
        self.text = text
        self.me = self  # a cycle: only the collector frees it


def encode(n):
    out = []
    for i in range(n):
        out.append(Token(("tok%d" % i).upper()))
    return len(out)


def forward(n):
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) % 1000003
    return acc


def idle_loop():
    loop = asyncio.new_event_loop()

    async def main():
        while True:
            await asyncio.sleep(1.0)

    loop.run_until_complete(main())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--counter", required=True)
    ap.add_argument("--loop", action="store_true")
    args = ap.parse_args()
    if args.loop:
        threading.Thread(target=idle_loop, daemon=True).start()
    n = 0
    last = 0.0
    while True:
        encode(1500)
        forward(40000)
        n += 1
        now = time.monotonic()
        if now - last >= 0.2:
            last = now
            tmp = args.counter + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"n": n, "t": time.time()}, fh)
            os.replace(tmp, args.counter)


if __name__ == "__main__":
    main()
