"""Stress of torch.profiler windows across threads: does the process survive? (not collected)

    python scripts/stress/stress_profiler_stop.py [--windows 800] [--window 0.3] [--plain]

Two threads run small ops (transposes, dtype round trips, matmuls) without pause while a third
starts and stops all-threads profiler windows back to back, the way the agent does
(``profile_all_threads``). With ``--plain`` each window is stopped directly; by default it is
stopped the agent's way (op callbacks removed first, a short pause, then the stop: see
``_remove_op_callbacks`` in infertop/agent/payload/window.py). Run two or three at once to load the
machine: the crash this guards against needs a thread preempted inside an op while the window
is finalised. Exit status 0: survived; -11 / 139: the process crashed.

Measured on the 2-core dev machine, torch 2.13 CPU, 0.3 s windows, two or three runs at once:
stopped directly, 3 of 6 runs crashed with SIGSEGV in ``ThreadLocalSubqueue::begin_op`` (after
~180, ~560 and ~950 windows); the agent's way, 0 of 4 runs (3,900 windows).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from infertop.agent.payload.kineto import _KinetoLog
from infertop.agent.payload.window import _remove_op_callbacks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", type=int, default=800)
    ap.add_argument("--window", type=float, default=0.3, help="seconds per window")
    ap.add_argument("--plain", action="store_true", help="stop windows directly (no callback removal)")
    args = ap.parse_args()
    stop = threading.Event()

    def work() -> None:
        x = torch.randn(256, 256)
        while not stop.is_set():
            y = x.t().contiguous().to(torch.float64).to(torch.float32).clone()
            (y @ x).sum().item()

    workers = [threading.Thread(target=work) for _ in range(2)]
    for t in workers:
        t.start()
    with torch.profiler.profile():  # the warm-up on the thread that first used the profiler
        pass
    config = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    log = _KinetoLog()
    t0 = time.monotonic()
    try:
        for i in range(args.windows):
            prof = torch.autograd.profiler.profile(use_kineto=True, experimental_config=config)
            prof._prepare_trace()
            level = log.quiet()
            prof._start_trace()
            time.sleep(args.window)
            c10 = log.quiet_c10()
            if not args.plain:
                _remove_op_callbacks(torch, prof)
            prof.__exit__(None, None, None)
            events = len(prof.kineto_results.events())
            log.restore_c10(c10)
            log.restore(level)
            if i % 100 == 0:
                print(f"window {i}: {events} events", flush=True)
            time.sleep(0.05)
    finally:
        stop.set()
        for t in workers:
            t.join()
    print(f"survived {args.windows} windows in {time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
