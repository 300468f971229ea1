"""Plumbing shared by the sample workloads: common flags, clean shutdown, throughput lines."""

from __future__ import annotations

import argparse
import random
import signal
import sys
import threading
import time
from collections.abc import Callable

from samples.common.truth import StageClock

COMMON_EPILOG = """\
Every sample prints "throughput: X.X req/s" to stdout about every 2 s, exits with status 0 on
SIGINT/SIGTERM or when --duration runs out, and with --truth FILE keeps FILE up to date (every
0.5 s, atomically) with its own measured seconds per stage, for checking infertop against.
"""


def add_common_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("common options")
    g.add_argument(
        "--truth",
        metavar="FILE",
        default=None,
        help="write ground-truth stage seconds as JSON to FILE (every 0.5 s and at exit)",
    )
    g.add_argument(
        "--duration",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="stop after SECONDS of serving (default 0: run until SIGINT/SIGTERM)",
    )
    g.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="torch intra-op threads (default 1)",
    )
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")


def setup_torch(threads: int, seed: int) -> None:
    import torch

    torch.set_num_threads(max(1, threads))
    torch.manual_seed(seed)
    random.seed(seed)


_STOP = threading.Event()


def _on_signal(signum: int, frame: object) -> None:
    _STOP.set()


def install_stop_handlers() -> threading.Event:
    """SIGINT and SIGTERM set the returned event instead of raising or killing the process.

    Idempotent: scripts call it once before their heavy imports and again in ``main``; both
    calls return the same event.
    """
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    return _STOP


class ThroughputReporter:
    """Prints ``throughput: X.X req/s`` every ``interval`` seconds from completed-request counts."""

    def __init__(self, count: Callable[[], int], interval: float = 2.0) -> None:
        self._count = count
        self.interval = interval
        self._last_t = time.perf_counter()
        self._last_n = count()

    def due(self) -> bool:
        return time.perf_counter() - self._last_t >= self.interval

    def next_due(self) -> float:
        """``time.perf_counter()`` value at which the next line is due."""
        return self._last_t + self.interval

    def report(self) -> None:
        now = time.perf_counter()
        n = self._count()
        rate = (n - self._last_n) / max(now - self._last_t, 1e-9)
        self._last_t, self._last_n = now, n
        try:
            sys.stdout.write(f"throughput: {rate:.1f} req/s\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            pass  # stdout went away; keep serving quietly


def serve_until_stopped(
    stop: threading.Event,
    duration: float,
    reporter: ThroughputReporter,
) -> None:
    """Main-thread loop for threaded samples: report throughput until stopped or timed out."""
    deadline = time.perf_counter() + duration if duration > 0 else None
    while not stop.is_set():
        now = time.perf_counter()
        if deadline is not None and now >= deadline:
            stop.set()
            break
        if reporter.due():
            reporter.report()
        wake = reporter.next_due()
        if deadline is not None:
            wake = min(wake, deadline)
        # blocks in one lock wait; a signal handler setting ``stop`` ends it at once
        stop.wait(max(0.0, wake - now))


def run_inline(
    stop: threading.Event,
    duration: float,
    reporter: ThroughputReporter,
    handle_one: Callable[[], None],
    clock: StageClock,
    truth_path: str | None,
    truth_interval: float = 0.5,
) -> None:
    """Main-thread loop for single-threaded samples: one request per iteration.

    The truth file is rewritten from this loop every ``truth_interval`` seconds rather than
    from a background thread: a sampler in blocking mode sometimes counts a blocked thread as
    running, and in a one-thread workload a second thread would be a noticeable share of it.
    """
    now = time.perf_counter()
    deadline = now + duration if duration > 0 else None
    next_write = now + truth_interval
    while not stop.is_set():
        handle_one()
        now = time.perf_counter()
        if reporter.due():
            reporter.report()
        if truth_path and now >= next_write:
            next_write = now + truth_interval
            try:
                clock.write(truth_path)
            except OSError:
                pass
        if deadline is not None and now >= deadline:
            break


def start_clock(truth_path: str | None, background: bool = True) -> StageClock:
    """A fresh clock; with ``truth_path``, write it now and (``background``) every 0.5 s from
    a daemon thread."""
    clock = StageClock()
    if truth_path:
        clock.write(truth_path)
        if background:
            clock.start_flusher(truth_path)
    return clock
