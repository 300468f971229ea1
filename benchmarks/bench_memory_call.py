"""What one memory call (``profile_memory``, agent/payload/window.py ``_MemoryCall``) costs the
target's call it profiles (not collected by pytest).

    python benchmarks/bench_memory_call.py [--calls N] [--layers N] [--width N] [--batch N]

In one process, a transformer-like stack of ``--layers`` encoder layers on CPU: the median of
``--calls`` plain calls against the median of as many calls inside a window over all threads
without ``profile_memory`` (the agent's other windows) and as many each profiled as its memory
call profiles one (hooks armed, the profiler started on the call's own thread and stopped at its
end), the share of that on the target's thread (the profiler's start and stop), and the agent
thread's reduction of the events. The per-call cost over the period between memory calls (one
every other window: 2 x period_s) is the share of the target's time they cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from infertop.agent.payload.constants import DEFAULT_CONFIG  # noqa: E402
from infertop.agent.payload.kineto import _KinetoLog, kineto_events  # noqa: E402
from infertop.agent.payload.reduce import reduce_events  # noqa: E402
from infertop.agent.payload.window import _experimental_config, _MemoryCall, _Window  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    layer = torch.nn.TransformerEncoderLayer(args.width, 4, 4 * args.width, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False).eval()
    x = torch.randn(args.batch, args.seq, args.width)
    log = _KinetoLog()
    w = _Window(torch, dict(DEFAULT_CONFIG), log, _experimental_config(torch)[0], True)
    w.start()
    w.stop()  # libkineto set up, as the agent's first window does
    with torch.no_grad():
        for _ in range(5):
            model(x)
        plain, profiled, target, reduce_s, events, windowed = [], [], [], [], [], []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            model(x)
            plain.append(time.perf_counter() - t0)
            call = _MemoryCall(torch, dict(DEFAULT_CONFIG, profile_memory=True), log)
            call.start()
            t0 = time.perf_counter()
            model(x)
            profiled.append(time.perf_counter() - t0)
            target.append(call.target_s)
            t0 = time.perf_counter()
            raw = call.stop()
            evs = kineto_events(raw, 100000, False)
            body = reduce_events(evs, call.t_start, call.t_end, memory=True)
            reduce_s.append(time.perf_counter() - t0)
            events.append(len(raw))
            win = _Window(torch, dict(DEFAULT_CONFIG), log, _experimental_config(torch)[0], False)
            win.start()
            t0 = time.perf_counter()
            model(x)
            windowed.append(time.perf_counter() - t0)
            win.stop()
    med = statistics.median
    extra = med(profiled) - med(plain)
    print(f"model call: {1000 * med(plain):.2f} ms plain, {1000 * med(profiled):.2f} ms as a memory call")
    print(f"  {1000 * med(windowed):.2f} ms under a window over all threads without profile_memory")
    print(f"  of which the profiler's start and stop on the target's thread: {1000 * med(target):.2f} ms")
    print(f"  events: {med(events):.0f}; the agent's reduction: {1000 * med(reduce_s):.2f} ms")
    stages = body["memory"]["stages"]
    print(f"  memory: {stages[:2]}")
    for period in (10.0, 2.0):
        share = (extra + med(reduce_s)) / (2 * period)
        every = f"a memory call every {2 * period:g} s"
        print(f"  at period_s {period:g} ({every}): {100 * share:.3f} % of the target's time")


if __name__ == "__main__":
    main()
