"""How long py-spy's blocking samples stop the target, per sample and per second.

A probe target spins on its main thread with ``--threads`` more Python threads waiting (a
server's pool). The kernel's per-thread accounting (``/proc/self/task/TID/schedstat``: time on
a CPU, time waiting for one) says how long the spinning thread was neither: stopped (by
ptrace); its voluntary context switches count the stops. So a busy machine's preemption does
not count as a stop. Each phase starts a fresh probe and attaches a sampler (none,
``py-spy record`` at a rate, or ``infertop record --no-inject`` at a rate); phases rotate.

    python benchmarks/bench_pause.py [--rates 100,50,25] [--threads 7] [--phase 8] [--rounds 3]
        [--tools py-spy,infertop,infertop/w5,infertop/c1]
    (infertop/wN: py-spy windows of N s; infertop/cN: every Nth window a CPU window, the rest
    wall windows, non-blocking; c1: CPU windows only, as before wall windows)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, sys, threading, time
threads, warmup, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
stop = threading.Event()
for _ in range(threads):
    threading.Thread(target=stop.wait, daemon=True).start()
task = f"/proc/self/task/{threading.get_native_id()}"

def sched():  # (ns on a CPU, ns waiting for one, voluntary switches) of this thread
    run, wait, _ = map(int, open(task + "/schedstat").read().split())
    vol = next(int(l.split()[1]) for l in open(task + "/status") if l.startswith("voluntary_ctxt"))
    return run, wait, vol

end_warm = time.perf_counter() + warmup
while time.perf_counter() < end_warm:
    pass
r0, w0, v0 = sched()
t0 = last = time.perf_counter()
prev_s = 0.0
stops = []  # the stopped part of each long turn
while last < t0 + seconds:
    now = time.perf_counter()
    if now - last > 100e-6:  # a turn is well under a µs: this one was interrupted
        r, w, _ = sched()
        s = (now - t0) - (r - r0 + w - w0) / 1e9  # stopped so far: neither running nor waiting
        if s - prev_s > 20e-6:
            stops.append(s - prev_s)
        prev_s = s
        now = time.perf_counter()
    last = now
t1 = time.perf_counter()
r1, w1, v1 = sched()
stops.sort()
# the thread only spins: time neither on a CPU nor waiting for one is time it was stopped
print(json.dumps({"seconds": t1 - t0, "stopped": max(0.0, (t1 - t0) - (r1 - r0 + w1 - w0) / 1e9),
                  "stops": v1 - v0, "waited": (w1 - w0) / 1e9,
                  "p50": stops[len(stops) // 2] if stops else 0.0,
                  "p99": stops[int(len(stops) * 0.99)] if stops else 0.0,
                  "max": stops[-1] if stops else 0.0, "over5ms": sum(x > 5e-3 for x in stops)}))
"""


def phase(tool: str, rate: float, threads: int, seconds: float, tmp: str) -> dict[str, float]:
    warm = 2.5
    probe = subprocess.Popen(
        [sys.executable, "-c", PROBE, str(threads), str(warm), str(seconds)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    sampler = None
    if tool == "py-spy":
        sampler = subprocess.Popen(
            [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(probe.pid),
             "--rate", f"{rate:g}", "--format", "raw", "--threads", "-o",
             os.path.join(tmp, "p.txt"), "--duration", str(int(seconds + warm + 5))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    elif tool.startswith("infertop"):  # infertop/wN: windows of N s; /cN: cpu_every N
        opts = {part[0]: part[1:] for part in tool.split("/")[1:] if part}
        window, cpu_every = opts.get("w", "1"), opts.get("c", "2")
        config = os.path.join(tmp, f"w{window}c{cpu_every}.toml")
        Path(config).write_text(f"[collect]\nwindow = {window}\ncpu_every = {cpu_every}\n")
        sampler = subprocess.Popen(
            [sys.executable, "-m", "infertop", "record", str(probe.pid), "-o",
             os.path.join(tmp, "r.infertop"), "--rate", f"{rate:g}", "--no-inject",
             "--config", config, "--duration", str(seconds + warm + 5)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    out, _ = probe.communicate(timeout=seconds + 60)
    if sampler is not None:
        sampler.terminate()
        sampler.wait(timeout=30)
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="100,50,25")
    ap.add_argument("--threads", type=int, default=7, help="waiting Python threads beside main")
    ap.add_argument("--phase", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tools", default="py-spy,infertop",
                    help="py-spy, infertop, infertop/wN (py-spy windows of N s)")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    modes = [("none", 0.0)] + [(t, r) for t in args.tools.split(",") for r in rates]
    tmp = tempfile.mkdtemp(prefix="infertop-bench-pause-")
    got: dict[tuple[str, float], list[dict[str, float]]] = {m: [] for m in modes}
    for i in range(args.rounds):
        k = i % len(modes)
        for mode in modes[k:] + modes[:k]:
            r = phase(mode[0], mode[1], args.threads, args.phase, tmp)
            got[mode].append(r)
            print(f"round {i + 1} {mode[0]:8s} {mode[1]:5g} Hz: stopped {1000 * r['stopped']:7.1f} ms "
                  f"in {r['stops']:5d} stops over {r['seconds']:.1f} s (waited for a CPU "
                  f"{1000 * r['waited']:.0f} ms)", flush=True)  # fmt: skip
    base = statistics.median(r["stopped"] / r["seconds"] for r in got[("none", 0.0)])
    base_n = statistics.median(r["stops"] / r["seconds"] for r in got[("none", 0.0)])
    print(f"\nprobe: main thread spinning + {args.threads} waiting threads; "
          f"{args.rounds} rounds x {args.phase:g} s; medians")
    print(f"{'sampler':10s} {'rate':>5s} {'stopped %':>10s} {'minus none':>10s} "
          f"{'stops/s':>8s} {'mean stop':>9s} {'p50':>7s} {'p99':>7s} {'max':>7s} {'>5ms/s':>6s}")  # fmt: skip
    for mode in modes:
        share = statistics.median(r["stopped"] / r["seconds"] for r in got[mode])
        per_s = statistics.median(r["stops"] / r["seconds"] for r in got[mode])
        extra_n = max(per_s - base_n, 1e-9)
        per_stop = (share - base) / extra_n * 1e6 if mode[0] != "none" else 0.0
        def med(key: str, rs: list[dict[str, float]] = got[mode]) -> float:
            return statistics.median(r[key] for r in rs)

        big = statistics.median(r["over5ms"] / r["seconds"] for r in got[mode])
        print(f"{mode[0]:10s} {mode[1]:5g} {100 * share:9.2f}% {100 * (share - base):9.2f}% "
              f"{per_s:8.1f} {per_stop:6.0f} µs {1e6 * med('p50'):4.0f} µs {1e6 * med('p99'):4.0f} µs "
              f"{1e3 * med('max'):4.1f} ms {big:6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
