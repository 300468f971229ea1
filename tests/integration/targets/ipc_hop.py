"""A two-process server in miniature: the parent hands each request's payload to a worker
process over a ``multiprocessing`` pipe and waits for the answer, as an API process does with
its inference worker. ``--items N`` sets the payload (a list of N floats, pickled on every
hop); the worker's ``forward`` works ``--forward-ms`` on each.

    python ipc_hop.py --items 200000 --forward-ms 5 [--seconds S]

Prints ``ready`` once the worker answered its first request.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import signal
import sys
import time


def forward(payload: list[float], ms: float) -> float:
    end = time.perf_counter() + ms / 1000.0
    acc = 0.0
    while time.perf_counter() < end:
        acc += payload[int(acc) % len(payload)] if payload else 1.0
    return acc


def worker(conn, ms: float) -> None:  # noqa: ANN001 - a Connection
    while True:
        try:
            payload = conn.recv()
        except (EOFError, OSError):
            return
        if payload is None:
            return
        try:
            conn.send(forward(payload, ms))
        except OSError:  # the parent is gone
            return


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200_000)
    ap.add_argument("--forward-ms", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=0.0, help="0: until stopped")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped: tell the worker, then go
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=worker, args=(there, args.forward_ms), name="ipc-hop-worker")
    proc.start()
    there.close()
    payload = [float(i) for i in range(args.items)]
    deadline = time.monotonic() + args.seconds if args.seconds else float("inf")
    first = True
    try:
        while time.monotonic() < deadline:
            here.send(payload)
            here.recv()
            if first:
                print("ready", flush=True)
                first = False
    except (KeyboardInterrupt, OSError):
        pass
    finally:
        try:
            here.send(None)
        except OSError:
            pass
        proc.join(5)
        if proc.is_alive():
            proc.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
