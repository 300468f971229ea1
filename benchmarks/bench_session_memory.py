"""infertop's own memory over a simulated hour of a busy live session, bounded and not.

Feeds a ``Session`` (the live one: ``LiveSource``'s, bounded by ``[collect] retain``; or, with
``--unbounded``, one that keeps everything, as before) the events of an hour at real rates,
as fast as it can: every second a py-spy window of 8 threads (the TUI tests' batching server,
~12 stacks a thread), 150 stage spans (an agent timing forward/preprocess/serialize calls), an
allocator reading, two NVML readings of two H100s (a fixture of real ones), and every 10 s a
torch-profiler window (the agent's default period). Every
5 simulated minutes it builds a snapshot the way the ingest worker does and prints the process
RSS, what the session holds and how long the snapshot took.

    python benchmarks/bench_session_memory.py [--minutes 60] [--retain 300] [--unbounded]
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tui"))

from gpu_data import gpu_readings  # tests/tui's own import style

from infertop.analysis.ops import OpAccumulator
from infertop.analysis.session import Session
from infertop.analysis.snapshot import StackAccumulator, build_snapshot
from infertop.collect.pyspy import RawSampleWindow
from infertop.model.events import StageSpan
from tests.collect.ops_data import make_allocator, make_op_window
from tests.tui.tui_data import MAIN_TID, TARGET, make_window

THREADS = 8
SPANS_PER_S = 150


def busy_window(rng: random.Random, t: float) -> RawSampleWindow:
    """The batching server's main-thread stacks on 8 worker threads, and its batcher."""
    one = make_window(rng, t, 1.0, phase=rng.random())
    rows = [r for r in one.counts if r[0] != MAIN_TID]
    for k in range(THREADS):
        rows += [(MAIN_TID + 10 + k, f"worker-{k}", st, n) for tid, _, st, n in one.counts
                 if tid == MAIN_TID]  # fmt: skip
    return RawSampleWindow(one.t_start, one.t_end, one.rate_hz, one.ticks, tuple(rows), 0, 0.0,
                           THREADS + 2)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--retain", type=float, default=300.0, help="seconds of full detail")
    ap.add_argument("--unbounded", action="store_true", help="keep everything (before)")
    ap.add_argument("--every", type=float, default=5.0, help="simulated minutes between lines")
    args = ap.parse_args()
    rng = random.Random(1)
    session = Session(retain_s=None if args.unbounded else args.retain)
    session.apply(TARGET)
    acc, ops = StackAccumulator(), OpAccumulator()
    proc = psutil.Process()
    t0 = TARGET.started
    print(f"{'unbounded' if args.unbounded else f'bounded, {args.retain:g} s kept'}: "
          f"{THREADS} threads, {SPANS_PER_S} spans/s, an op window every 10 s")  # fmt: skip
    print(f"{'minute':>6} {'RSS MiB':>8} {'windows kept':>12} {'spans kept':>10} "
          f"{'op windows kept':>15} {'NVML kept':>9} {'calls counted':>13} {'snapshot ms':>11}")  # fmt: skip
    stages = ("forward", "forward", "forward", "preprocess", "serialize")
    seconds = int(args.minutes * 60)
    nvml = gpu_readings(t0, 600)  # ten minutes of readings, repeated
    started = time.monotonic()
    for i in range(seconds):
        t = t0 + i
        for ev in session.intern(busy_window(rng, t)):
            session.apply(ev)
        for k in range(SPANS_PER_S):
            start = t + k / SPANS_PER_S
            stage = stages[k % len(stages)]
            session.apply(StageSpan(MAIN_TID + 10 + k % THREADS, stage, start,
                                    start + rng.lognormvariate(-4.0, 0.6)))  # fmt: skip
        session.apply(make_allocator(t + 0.5, i))
        for r in nvml[2 * (i % 600) : 2 * (i % 600) + 2]:
            session.apply(type(r)(r.t + (i - i % 600), r.devices))
        if i % 10 == 1:
            session.apply(make_op_window(rng, t + 0.2))
        if (i + 1) % int(args.every * 60) == 0:
            s0 = time.perf_counter()
            snap = build_snapshot(session, accumulator=acc, op_accumulator=ops)
            ms = 1000 * (time.perf_counter() - s0)
            gc.collect()
            calls = sum(x.calls or 0 for x in snap.totals)
            print(f"{(i + 1) / 60:6.0f} {proc.memory_info().rss / 2**20:8.1f} "
                  f"{len(session.windows):12d} {len(session.spans):10d} "
                  f"{len(session.op_windows):15d} {len(session.gpu):9d} {calls:13d} {ms:11.1f}",
                  flush=True)  # fmt: skip
    print(f"fed {args.minutes:g} simulated minutes in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
