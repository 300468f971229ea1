"""A target without torch for the pause and call-sample tests (any Python >= 3.8; not a test).

The main thread calls ``encode_batch`` (~5 ms) about 60 times a second; one call in
``--rare-every`` takes a slow path (``rare_slow_path``, ~40 ms). Every ``--gc-every`` seconds it
runs a full collection over a heap of cycles (a pause of some milliseconds). A second thread runs
an asyncio event loop whose one callback blocks it for ``--block-ms`` once a second. With
``--forward-ms``, each iteration also calls ``forward`` (a sleep of that long), which takes
``--spell-factor`` times longer for ``--spell-s`` seconds starting ``--spell-at`` seconds after
the start (a spell of slow forwards); with ``--forward-busy`` it spins on the CPU instead.
``--gil-hog`` adds a thread that keeps the GIL in C; ``--serialize`` ends each iteration with a
``json.dumps`` that keeps it (~20 ms, on the main thread: no other thread waits for it). Writes
``--status`` every 0.1 s as JSON: iterations, the full collections it ran and their own
measured time, whether any ``gc.callbacks`` are installed, the spell's unix times and the thread
ids, so tests can check what the agent saw and that detach left nothing behind.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import threading
import time


def rare_slow_path(items):
    time.sleep(0.04)
    return [str(i) * 2 for i in items]


def common_path(items):
    time.sleep(0.005)
    return [str(i) for i in items]


def encode_batch(items, n, rare_every):
    if rare_every and n % rare_every == rare_every - 1:
        return rare_slow_path(items)
    return common_path(items)


def forward(ms, busy=False):
    if not busy:
        time.sleep(ms / 1000.0)
        return
    until = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < until:  # on the CPU, as a real forward is: a neighbour slows it
        pass


class Node:
    def __init__(self):
        self.other = self  # a cycle: only the collector frees it


def hog_the_gil():
    """A C loop that keeps the GIL: the builtin sum over a range checks no eval breaker, so no
    other Python thread runs until it returns (~50 ms a call)."""
    while True:
        sum(range(2000000))
        time.sleep(0.001)


def run_loop(block_ms, ready):
    loop = asyncio.new_event_loop()

    def block():
        time.sleep(block_ms / 1000.0)  # a callback that hogs the loop
        loop.call_later(1.0, block)

    async def main():
        ready["tid"] = threading.get_native_id()
        loop.call_later(1.0, block)
        while True:
            await asyncio.sleep(0.05)

    loop.run_until_complete(main())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--status", required=True)
    ap.add_argument("--rare-every", type=int, default=50)
    ap.add_argument("--gc-every", type=float, default=0.5)
    ap.add_argument("--heap", type=int, default=200000, help="objects alive for the collector")
    ap.add_argument("--block-ms", type=float, default=80.0)
    ap.add_argument("--forward-ms", type=float, default=0.0)
    ap.add_argument("--spell-at", type=float, default=0.0, help="seconds after start; 0: none")
    ap.add_argument("--spell-s", type=float, default=4.0)
    ap.add_argument("--spell-factor", type=float, default=3.0)
    ap.add_argument("--forward-busy", action="store_true", help="forward spins on a CPU")
    ap.add_argument("--gil-hog", action="store_true", help="a thread that keeps the GIL in C")
    ap.add_argument("--serialize", action="store_true", help="a json.dumps keeping the GIL")
    args = ap.parse_args()
    started = time.time()
    spell = (started + args.spell_at, started + args.spell_at + args.spell_s) if args.spell_at else None
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    keep = [[i] for i in range(args.heap)]  # tracked objects: a full collection walks them
    # what --serialize encodes: json.dumps keeps the GIL for the whole call (~20 ms here)
    response = None
    if args.serialize:
        response = [{"ids": list(range(50)), "text": "x" * 100} for _ in range(6000)]
    loop_thread = {}
    if args.gil_hog:
        threading.Thread(target=hog_the_gil, daemon=True).start()
    if args.block_ms > 0:
        threading.Thread(target=run_loop, args=(args.block_ms, loop_thread), daemon=True).start()
    n = full = 0
    gc_s = 0.0
    last = next_gc = time.monotonic()
    while not stopping:
        encode_batch(range(8), n, args.rare_every)
        if args.forward_ms:
            now_wall = time.time()
            slow = spell is not None and spell[0] <= now_wall < spell[1]
            forward(args.forward_ms * (args.spell_factor if slow else 1.0), args.forward_busy)
        if response is not None:
            json.dumps(response)
        n += 1
        time.sleep(0.01)
        now = time.monotonic()
        if args.gc_every and now >= next_gc:
            next_gc = now + args.gc_every
            for _ in range(100):
                Node()
            t0 = time.perf_counter()
            gc.collect()
            gc_s += time.perf_counter() - t0
            full += 1
        if now - last >= 0.1:
            last = now
            status = {
                "t": time.time(), "n": n, "full_collections": full, "gc_s": gc_s, "heap": len(keep),
                "spell": spell,
                "gc_callbacks": len(gc.callbacks), "main_tid": threading.get_native_id(),
                "loop_tid": loop_thread.get("tid"),
            }  # fmt: skip
            tmp = args.status + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(status, fh)
            os.replace(tmp, args.status)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
