"""A small torch CPU "inference" loop for the agent tests (not a test itself).

Main thread: matmuls and a Python-level op loop (stage "forward" by default). A worker thread:
ops inside ``record_function("infertop:postprocess")``. Iteration counters are written to
``--counter`` every 0.1 s as JSON, so tests can measure throughput. SIGTERM ends it cleanly
(threads joined, exit 0) so its stdout/stderr can be compared byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time


def main() -> int:
    import faulthandler

    faulthandler.enable()
    ap = argparse.ArgumentParser()
    ap.add_argument("--counter", required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--arm", action="store_true", help="call infertop.agent.arm() at start")
    ap.add_argument("--no-torch", action="store_true", help="do not import torch")
    ap.add_argument("--block-main", type=float, default=0.0,
                    help="after start-up, block the main thread in one C call for this long")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--trace", help="append 'time count cpu' of the main loop every 20 ms to this file")
    ap.add_argument("--warm-profiler", action="store_true",
                    help="run one torch.profiler session first (as if the target used it)")
    args = ap.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    counts = {"main": 0}

    if args.no_torch:
        torch = None
    else:
        import torch

        torch.set_num_threads(1)
        if args.warm_profiler:
            # the target's own profiler use prints libkineto lines: keep them out of the
            # stderr the tests compare (they are not ours)
            saved = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            try:
                with torch.profiler.profile():
                    torch.ones(1)
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                os.close(devnull)
    if args.arm:
        import infertop.agent

        infertop.agent.arm()

    def worker(i: int) -> None:
        key = "worker%d" % i
        counts[key] = 0
        a = torch.randn(args.size, args.size)
        while not stop.is_set():
            with torch.profiler.record_function("infertop:postprocess"):
                b = torch.softmax(a @ a, dim=-1)
                b.sum()
            counts[key] += 1
            time.sleep(0.001)

    threads = []
    if torch is not None:
        for i in range(args.workers):
            t = threading.Thread(target=worker, args=(i,), name="worker%d" % i)
            t.start()
            threads.append(t)

    def write_counter() -> None:
        tmp = args.counter + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"t": time.time(), "pid": os.getpid(), **counts}, fh)
        os.replace(tmp, args.counter)

    if args.block_main > 0:
        write_counter()
        time.sleep(args.block_main)  # one C call: pending calls wait for it

    x = torch.randn(args.size, args.size) if torch is not None else None
    last = 0.0
    trace = open(args.trace, "a", buffering=1 << 16) if args.trace else None
    last_trace = 0.0
    while not stop.is_set():
        if torch is not None:
            y = x @ x
            for _ in range(4):
                y = torch.relu(y) + 1.0
            float(y[0, 0])
        else:
            sum(i * i for i in range(200))
        counts["main"] += 1
        now = time.monotonic()
        if now - last >= 0.1:
            last = now
            write_counter()
        if trace is not None and now - last_trace >= 0.02:
            last_trace = now
            trace.write("%.4f %d %.6f\n" % (time.time(), counts["main"], time.thread_time()))
    for t in threads:
        t.join()
    write_counter()
    if trace is not None:
        trace.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
