"""Throughput cost of the agent on a busy torch CPU target (not collected by pytest).

    python tests/agent/bench_agent_overhead.py [--window S] [--period S] [--max-events N]
        [--duration S] [--size N]

Starts ``targets/torch_loop.py`` (agent armed; its main loop logs its iteration count every
20 ms), connects one client that starts profiling with the given (default: the agent's default)
configuration, and measures the cost two ways:

- per window: the main-loop iterations lost in the 3 s around each window, against the rate of
  the 2 s just before it (a local baseline, robust to the slow drifts of a shared machine);
  cost = mean loss / period;
- interleaved phases: alternating ``stop``/``start`` phases of one period each, comparing mean
  iteration rates (noisier; printed as a cross-check).
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
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from infertop.agent import protocol as P  # noqa: E402


def load_trace(path: str) -> tuple[list[float], list[int]]:
    ts, cs = [], []
    with open(path) as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 2:
                ts.append(float(parts[0]))
                cs.append(int(parts[1]))
    return ts, cs


def count_at(ts: list[float], cs: list[int], t: float) -> float:
    i = bisect.bisect_left(ts, t)
    if i <= 0:
        return cs[0]
    if i >= len(ts):
        return cs[-1]
    t0, t1, c0, c1 = ts[i - 1], ts[i], cs[i - 1], cs[i]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=None)
    ap.add_argument("--period", type=float, default=None)
    ap.add_argument("--max-events", type=int, default=None)
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of profiling")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()

    tag = "%d-%d" % (os.getpid(), time.time())
    counter, trace = "/tmp/infertop-bench-%s.json" % tag, "/tmp/infertop-bench-%s.trace" % tag
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "targets" / "torch_loop.py"), "--counter", counter, "--arm",
         "--size", str(args.size), "--trace", trace, "--workers", str(args.workers)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    windows: list[dict] = []
    try:
        time.sleep(5)
        sock = P.connect(P.socket_path(proc.pid, os.geteuid()), timeout=30)
        P.send_msg(sock, {"cmd": "hello", "client": "bench"})
        P.recv_msg(sock)
        cfg: dict = {"cmd": "configure"}
        for key, value in (("window_s", args.window), ("period_s", args.period), ("max_events", args.max_events)):
            if value is not None:
                cfg[key] = value
        P.send_msg(sock, cfg)
        config = P.recv_msg(sock)["config"]
        period = config["period_s"]
        print("config", {k: config[k] for k in ("window_s", "period_s", "max_events")}, flush=True)

        def drain() -> None:
            try:
                while True:
                    m = P.recv_msg(sock)
                    if m.get("type") == "window":
                        windows.append(m)
            except P.ProtocolError:
                pass

        threading.Thread(target=drain, daemon=True).start()
        phases = []  # (on, t0, t1)
        t_end = time.time() + args.duration
        on = False
        while time.time() < t_end:
            P.send_msg(sock, {"cmd": "start" if on else "stop"})
            t0 = time.time()
            time.sleep(period)
            phases.append((on, t0, time.time()))
            on = not on
        P.send_msg(sock, {"cmd": "detach"})
        time.sleep(1.0)
        sock.close()
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    ts, cs = load_trace(trace)
    for p in (counter, trace):
        try:
            os.unlink(p)
        except OSError:
            pass
    if out or err:
        print("TARGET OUTPUT (must be empty):", out[-300:], err[-1000:])

    losses = []
    for w in windows:
        ws = w["t_start"]
        base = (count_at(ts, cs, ws - 0.5) - count_at(ts, cs, ws - 2.5)) / 2.0
        got = count_at(ts, cs, ws + 2.5) - count_at(ts, cs, ws - 0.5)
        if base <= 0:
            continue
        loss = (base * 3.0 - got) / base
        losses.append(loss)
        print("window %3d events %6d%s len %.3f s  lost %.3f s of main-loop time" % (
            w["seq"], w["events"], "*" if w["truncated"] else " ", w["t_end"] - w["t_start"], loss))
    if losses:
        mean = sum(losses) / len(losses)
        print("per-window: mean loss %.3f s per window -> cost %.2f %% at period %.1f s" % (
            mean, 100.0 * mean / period, period))
    rates = {True: [], False: []}
    for on, t0, t1 in phases[1:]:
        rates[on].append((count_at(ts, cs, t1) - count_at(ts, cs, t0)) / (t1 - t0))
    if rates[True] and rates[False]:
        off = sum(rates[False]) / len(rates[False])
        onr = sum(rates[True]) / len(rates[True])
        print("phases: off %.0f it/s, on %.0f it/s -> cost %.2f %% (%d+%d phases)" % (
            off, onr, 100.0 * (off - onr) / off, len(rates[False]), len(rates[True])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
