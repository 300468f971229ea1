"""Throughput cost of the agent on a busy torch CPU target (not collected by pytest).

    python benchmarks/bench_agent_overhead.py [--window S] [--period S] [--max-events N]
        [--size N] [--off S] [--on S] [--rounds N]

Starts ``targets/torch_loop.py`` with the agent armed (the same payload an injection runs; the
main loop logs its iteration count every 20 ms) and alternates, in one run, phases without a
client ("off") and phases with a client that keeps profiling started ("on"), beginning and
ending with "off". Reports:

- interleaved: 1 - mean(on rate) / mean(off rate);
- per window: main-loop time lost in the 3 s around each window against the 2 s before it,
  summed over the "on" time (robust to the slow drifts of a shared machine), and the agent's
  own estimate (``cost_s`` of each window message).

``--size 64`` (default) is a pathological target: ~1M profiler events/s from tiny ops on two
threads; ``--size 256`` has bigger ops (~70k events/s), closer to a real model.
"""

from __future__ import annotations

import argparse
import bisect
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from infertop.agent import protocol as P  # noqa: E402


def load_trace(path: str) -> tuple[list[float], list[int], list[float]]:
    ts, cs, cpu = [], [], []
    with open(path) as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 3:
                ts.append(float(parts[0]))
                cs.append(int(parts[1]))
                cpu.append(float(parts[2]))
    return ts, cs, cpu


def count_at(ts: list[float], cs: list[int], t: float) -> float:
    i = bisect.bisect_left(ts, t)
    if i <= 0:
        return cs[0]
    if i >= len(ts):
        return cs[-1]
    t0, t1, c0, c1 = ts[i - 1], ts[i], cs[i - 1], cs[i]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1


def thread_cpu(pid: int, tid: int) -> float:
    """utime + stime of one thread, in seconds."""
    try:
        with open("/proc/%d/task/%d/stat" % (pid, tid)) as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=None)
    ap.add_argument("--period", type=float, default=None)
    ap.add_argument("--max-events", type=int, default=None)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--off", type=float, default=40.0, help="seconds of each phase without profiling")
    ap.add_argument("--on", type=float, default=80.0, help="seconds of each phase with profiling")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    tag = "%d-%d" % (os.getpid(), time.time())
    counter, trace = "/tmp/infertop-bench-%s.json" % tag, "/tmp/infertop-bench-%s.trace" % tag
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "agent" / "targets" / "torch_loop.py"), "--counter", counter, "--arm",
         "--size", str(args.size), "--trace", trace, "--workers", str(args.workers)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    windows: list[dict] = []
    phases: list[tuple[bool, float, float]] = []
    agent_cpu = 0.0
    try:
        time.sleep(5)
        path = P.socket_path(proc.pid, os.geteuid())
        cfg: dict = {"cmd": "configure"}
        for key, value in (("window_s", args.window), ("period_s", args.period), ("max_events", args.max_events)):
            if value is not None:
                cfg[key] = value
        config = None
        for r in range(args.rounds):
            t0 = time.time()
            time.sleep(args.off)
            phases.append((False, t0, time.time()))
            sock = P.connect(path, timeout=30)
            P.send_msg(sock, {"cmd": "hello", "client": "bench"})
            agent_tid = P.recv_msg(sock)["agent_tid"]
            cpu0 = thread_cpu(proc.pid, agent_tid)
            P.send_msg(sock, cfg)
            config = P.recv_msg(sock)["config"]
            P.send_msg(sock, {"cmd": "start"})

            def drain(sock=sock) -> None:
                try:
                    while True:
                        try:
                            m = P.recv_msg(sock)
                        except P.MessageTimeout:
                            continue
                        if m.get("type") == "window":
                            windows.append(m)
                except P.ProtocolError:
                    pass

            th = threading.Thread(target=drain, daemon=True)
            th.start()
            t0 = time.time()
            time.sleep(args.on)
            phases.append((True, t0, time.time()))
            P.send_msg(sock, {"cmd": "detach"})
            time.sleep(1.0)
            sock.close()
            agent_cpu += thread_cpu(proc.pid, agent_tid) - cpu0
        t0 = time.time()
        time.sleep(args.off)
        phases.append((False, t0, time.time()))
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    ts, cs, cpu = load_trace(trace)
    for p in (counter, trace):
        try:
            os.unlink(p)
        except OSError:
            pass
    print("config", {k: config[k] for k in ("window_s", "period_s", "max_events")} if config else None)
    if out or err:
        print("TARGET OUTPUT (must be empty):", out[-300:], err[-1000:])

    rates = {True: [], False: []}
    cpu_per_it = {True: [0.0, 0.0], False: [0.0, 0.0]}  # main-thread CPU seconds, iterations
    for on, t0, t1 in phases:
        its = count_at(ts, cs, t1) - count_at(ts, cs, t0)
        rate = its / (t1 - t0)
        rates[on].append(rate)
        used = count_at(ts, cpu, t1) - count_at(ts, cpu, t0)
        cpu_per_it[on][0] += used
        cpu_per_it[on][1] += its
        print("%-3s %5.0f s  %8.0f it/s  %6.2f µs of main-thread CPU per iteration" % (
            "on" if on else "off", t1 - t0, rate, 1e6 * used / max(its, 1)))
    off = sum(rates[False]) / len(rates[False])
    onr = sum(rates[True]) / len(rates[True])
    on_time = sum(t1 - t0 for on, t0, t1 in phases if on)

    lost = 0.0
    for w in windows:
        ws = w["t_start"]
        base = (count_at(ts, cs, ws - 0.5) - count_at(ts, cs, ws - 2.5)) / 2.0
        got = count_at(ts, cs, ws + 2.5) - count_at(ts, cs, ws - 0.5)
        loss = (base * 3.0 - got) / base if base > 0 else 0.0
        lost += loss
        print("window %3d events %6d%s  agent's estimate %.3f s, measured loss %.3f s" % (
            w["seq"], w["events"], "*" if w["truncated"] else " ", w.get("cost_s", 0.0), loss))
    estimate = sum(w.get("cost_s", 0.0) for w in windows)
    print("interleaved: off %.0f it/s, on %.0f it/s -> cost %.2f %%" % (off, onr, 100.0 * (off - onr) / off))
    print("per window: %d windows in %.0f s on: measured loss %.2f s -> %.2f %%; agent's estimate %.2f %%" % (
        len(windows), on_time, lost, 100.0 * lost / on_time, 100.0 * estimate / on_time))
    print("agent thread CPU: %.2f s in %.0f s on -> %.2f %% of a core (it holds the GIL for most of it)" % (
        agent_cpu, on_time, 100.0 * agent_cpu / on_time))
    inflation = (cpu_per_it[True][0] / cpu_per_it[True][1]) / (cpu_per_it[False][0] / cpu_per_it[False][1]) - 1
    print("main-thread CPU per iteration: %+.2f %% while profiling is on (recording overhead)" % (100 * inflation))
    print("CPU model (robust to a noisy machine): recording overhead + the agent's GIL-holding "
          "work = %.2f %% of a GIL-bound target's throughput" % (100 * inflation + 100.0 * agent_cpu / on_time))
    return 0


if __name__ == "__main__":
    sys.exit(main())
