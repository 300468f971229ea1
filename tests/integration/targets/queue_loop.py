"""A batcher that waits for its requests (not a test): a worker thread takes requests from a
``queue.Queue`` and runs a short ``forward`` (5 ms) on each; a producer hands it one every
``argv[1]`` ms (default 20). At 20 ms the worker spends most of its wall time blocked in
``Queue.get``: the batching queue (queue-wait); at 1 ms it never waits."""

from __future__ import annotations

import queue
import sys
import threading
import time


def forward(x: int) -> int:
    end = time.perf_counter() + 0.005
    n = 0
    while time.perf_counter() < end:
        n += x
    return n


def worker(q: queue.Queue) -> None:
    while True:
        forward(q.get())


def main() -> None:
    q: queue.Queue = queue.Queue()
    threading.Thread(target=worker, args=(q,), daemon=True, name="batcher").start()
    print("ready", flush=True)
    interval = float(sys.argv[1]) / 1000 if len(sys.argv) > 1 else 0.02
    i = 0
    while True:
        time.sleep(interval)
        while q.qsize() > 100:  # the producer faster than the worker: keep the backlog short
            time.sleep(0.005)
        q.put(i)
        i += 1


if __name__ == "__main__":
    sys.exit(main())
