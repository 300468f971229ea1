#!/usr/bin/env python
"""Sample (d): a router process handing requests to worker processes.

The router (the process you start) runs client threads that make prompts and send each one to
a live worker, round robin, over that worker's own pipe; it prints the throughput. Each worker
(``multiprocessing``, spawn start method) is textgen's batcher: it owns a tokenizer and a tiny
transformer LM and serves batches through the same stages as ``textgen_service.py``
(preprocess, forward, postprocess, serialize), then sends the router the reply's size.

A worker that dies (killed, crashed) is noticed by the router, which says so in one line on
stdout and carries on with the others; requests the dead worker held are answered empty. The
workers end when the router does (their pipe closes), also when it is killed.

Run from the repo root as ``python samples/multiproc_service.py --workers 3``. See ``--help``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

if __name__ == "__main__":  # catch SIGINT/SIGTERM already while torch is being imported
    from samples.common.runtime import install_stop_handlers

    install_stop_handlers()

import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import queue  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from multiprocessing.connection import Connection, wait  # noqa: E402

from samples.common.runtime import (  # noqa: E402
    ThroughputReporter,
    install_stop_handlers,
    serve_until_stopped,
)
from samples.common.tokenizer import CORPUS_PATH  # noqa: E402

REPLY_TIMEOUT_S = 5.0  # a client gives up on a reply after this long (its worker is stuck)


# --------------------------------------------------------------------------- worker process
def worker_main(index: int, conn: Connection, args: argparse.Namespace) -> None:
    """One worker: textgen's batcher fed from the router's pipe; replies go back on it."""
    stop = install_stop_handlers()  # Ctrl-C reaches the whole group: the router decides
    from samples.common.annotated import annotated
    from samples.common.runtime import setup_torch, start_clock
    from samples.common.tokenizer import Tokenizer
    from samples.textgen_service import Batcher, Request, build_model

    setup_torch(args.threads, args.seed + index)
    tokenizer = Tokenizer(CORPUS_PATH.read_text(encoding="utf-8"), slow=args.slow_tokenizer)
    args.top_logprobs = max(1, min(args.top_logprobs, tokenizer.vocab_size))
    model = build_model(tokenizer.vocab_size, args)
    truth = f"{args.truth}.worker{index}" if args.truth else None
    clock = start_clock(truth)
    requests: queue.Queue[Request] = queue.Queue()

    class PipeBatcher(Batcher):
        def serve(self, batch: list[Request]) -> None:
            super().serve(batch)
            try:
                conn.send([(r.rid, len(r.body)) for r in batch])
            except (OSError, ValueError):
                stop.set()  # the router is gone

    def read_requests() -> None:
        try:
            while True:
                rid, prompt, submitted = conn.recv()
                requests.put(Request(rid=rid, prompt=prompt, submitted=submitted))
        except (EOFError, OSError, ValueError, TypeError):
            stop.set()  # the router closed the pipe or died

    threading.Thread(target=read_requests, name="pipe-reader", daemon=True).start()
    if index + 1 == args.slow_worker:
        slow_down(model, args.slowdown)
    batcher = PipeBatcher(tokenizer, model, args, annotated(clock, args.annotate))
    try:
        conn.send(("ready", index))
    except OSError:
        return
    batcher.run(requests, stop)
    clock.close(truth)


def slow_down(model, factor: float) -> None:  # noqa: ANN001 - a torch module
    """Make every forward pass of ``model`` take at least ``factor`` times as long (the extra a
    sleep, as on a replica whose GPU is throttled or whose host is busy): a straggler."""
    inner = model.forward

    def slowed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        t0 = time.perf_counter()
        out = inner(*args, **kwargs)
        time.sleep((factor - 1.0) * (time.perf_counter() - t0))
        return out

    model.forward = slowed


# --------------------------------------------------------------------------- router process
class Router:
    """Sends prompts to live workers round robin and wakes each client when its reply comes."""

    def __init__(self, conns: list[Connection], procs: list[mp.Process]) -> None:
        self.conns = conns
        self.procs = procs
        self.alive = [True] * len(conns)
        self.lock = threading.Lock()
        self.pending: dict[int, tuple[int, threading.Event]] = {}  # rid -> (worker, event)
        self.completed = 0
        self.stopping = False  # set at shutdown: workers ending then is no news
        self._next = 0

    def submit(self, rid: int, prompt: str) -> threading.Event | None:
        done = threading.Event()
        with self.lock:
            live = [i for i, ok in enumerate(self.alive) if ok]
            if not live:
                return None
            w = live[self._next % len(live)]
            self._next += 1
            self.pending[rid] = (w, done)
        try:
            self.conns[w].send((rid, prompt, time.perf_counter()))
        except (OSError, ValueError):
            self.worker_gone(w)
        return done

    def worker_gone(self, w: int) -> None:
        with self.lock:
            if not self.alive[w]:
                return
            self.alive[w] = False
            left = sum(self.alive)
            for rid, (ww, ev) in list(self.pending.items()):
                if ww == w:
                    del self.pending[rid]
                    ev.set()
        if self.stopping:
            return
        try:
            sys.stdout.write(f"worker {w + 1} (pid {self.procs[w].pid}) exited; {left} left\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            pass

    def read_replies(self, stop: threading.Event) -> None:
        index = {id(c): i for i, c in enumerate(self.conns)}
        while not stop.is_set():
            live = [c for i, c in enumerate(self.conns) if self.alive[i]]
            if not live:
                stop.wait(0.1)
                continue
            try:
                ready = wait(live, timeout=0.1)
            except (OSError, ValueError):  # a pipe closed at shutdown
                continue
            for c in ready:
                w = index[id(c)]
                try:
                    msg = c.recv()
                except (EOFError, OSError):
                    self.worker_gone(w)
                    continue
                if isinstance(msg, list):
                    with self.lock:
                        for rid, _size in msg:
                            entry = self.pending.pop(rid, None)
                            if entry is not None:
                                entry[1].set()
                        self.completed += len(msg)


def client_loop(cid: int, router: Router, stop: threading.Event, words: list[str],
                args: argparse.Namespace) -> None:  # fmt: skip
    from samples.textgen_service import make_prompt

    rng = random.Random(args.seed * 1000 + cid)
    period = 1.0 / args.rate if args.rate > 0 else 0.0
    next_at = time.perf_counter()
    n = 0
    while not stop.is_set():
        if period:
            delay = next_at - time.perf_counter()
            if delay > 0 and stop.wait(delay):
                return
            next_at = max(next_at + period, time.perf_counter() - period)
        done = router.submit(cid * 10_000_000 + n, make_prompt(rng, words, *args.prompt_words))
        n += 1
        if done is None:  # no worker left
            stop.wait(0.5)
            continue
        done.wait(REPLY_TIMEOUT_S)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from samples.textgen_service import parse_args as textgen_args

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--slow-worker", type=int, default=0)
    p.add_argument("--slowdown", type=float, default=1.5)
    ours, rest = p.parse_known_args(argv)
    if "-h" in rest or "--help" in rest:
        print(
            "usage: multiproc_service.py [--workers N] [--slow-worker I [--slowdown F]]\n"
            "                            [textgen_service options]\n\n"
            "A router process with N worker processes (default 3, at most 8), each serving\n"
            "textgen_service's pipeline; every textgen_service option applies to each worker\n"
            "(--clients and --rate to the router). --truth FILE writes FILE.workerI per worker.\n"
            "--slow-worker I makes worker I (1..N) a straggler: each forward pass of its model\n"
            "takes at least F times as long (default 1.5; the extra is a sleep, as on a\n"
            "throttled GPU). With --annotate its forward calls are timed stage calls, which\n"
            "infertop compares across the workers.\n"
        )
        sys.exit(0)
    args = textgen_args(rest)
    if not 1 <= ours.workers <= 8:
        p.error("--workers must be between 1 and 8")
    if not 0 <= ours.slow_worker <= ours.workers:
        p.error("--slow-worker must name a worker, 1 to --workers")
    if ours.slowdown < 1.0:
        p.error("--slowdown must be at least 1")
    args.workers, args.slow_worker, args.slowdown = ours.workers, ours.slow_worker, ours.slowdown
    return args


def main(argv: list[str] | None = None) -> int:
    stop = install_stop_handlers()
    args = parse_args(argv)
    corpus = CORPUS_PATH.read_text(encoding="utf-8")
    words = sorted(set(re.findall(r"[A-Za-z]+(?:'[a-z]+)?|[0-9]+|[,;:]", corpus)))
    ctx = mp.get_context("spawn")
    conns: list[Connection] = []
    procs: list[mp.Process] = []
    for i in range(args.workers):
        here, there = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=worker_main, args=(i, there, args), name=f"worker-{i + 1}")
        proc.daemon = True
        proc.start()
        there.close()
        conns.append(here)
        procs.append(proc)
    for i, c in enumerate(conns):  # wait until every worker has its model
        while not stop.is_set() and procs[i].is_alive() and not c.poll(0.1):
            pass
        if stop.is_set():
            break
        try:
            c.recv()
        except (EOFError, OSError):
            continue
        sys.stdout.write(f"worker {i + 1} (pid {procs[i].pid}) ready\n")
        sys.stdout.flush()
    router = Router(conns, procs)
    threads = [threading.Thread(target=router.read_replies, args=(stop,), name="replies")]
    threads += [
        threading.Thread(target=client_loop, args=(i, router, stop, words, args),
                         name=f"client-{i}")
        for i in range(args.clients)
    ]  # fmt: skip
    for t in threads:
        t.daemon = True
        t.start()
    if not stop.is_set():
        serve_until_stopped(stop, args.duration, ThroughputReporter(lambda: router.completed))
    stop.set()
    router.stopping = True
    for c in conns:  # the workers see their pipe close and finish
        c.close()
    for p in procs:
        p.join(timeout=5.0)
        if p.is_alive():
            p.terminate()
            p.join(timeout=2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
