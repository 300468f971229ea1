"""What the agent's evidence for slow calls costs the target: GC timing, event-loop heartbeats
and the call sampler (not collected by pytest).

Each phase starts two fresh processes of ``benchmarks/tail_target.py`` on Python 3.12, each
pinned to a core of its own (the pair swaps cores every round), one under test and a plain
twin, and measures over the same seconds both throughputs (iterations per wall second) and
their kernel accounting (iterations per CPU second of the whole process: /proc/PID/stat, the
agent's thread included). Modes, rotating per round:

- ``none``       nothing injected: the ratio of two plain twins, the noise floor;
- ``spans``      the agent timing ``encode`` and ``forward`` (sys.monitoring), no call samples,
                 no pauses: what timing stage functions cost before this work;
- ``defaults``   the agent at its defaults: spans, call samples at 100 Hz, GC pauses and
                 event-loop heartbeats;
- ``1000 Hz``    the call sampler at ten times its default rate.

    python benchmarks/bench_tail_cost.py [--rounds 3] [--phase 20] [--python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infertop.agent import protocol as P  # noqa: E402
from infertop.agent.inject import inject  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
MODES = {
    "none": None,
    "spans": {"call_sample_hz": 0, "pauses": False},
    "defaults": {},
    "1000 Hz": {"call_sample_hz": 1000},
}
RULES = [["preprocess", "*tail_target.py:encode"], ["forward", "*tail_target.py:forward"]]


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def count(path: str) -> tuple[float, int]:
    for _ in range(200):
        try:
            with open(path) as fh:
                d = json.load(fh)
            return d["t"], d["n"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)
    raise RuntimeError(f"no counter at {path}")


class Session:
    """The agent injected and started with ``config``; its messages read and dropped."""

    def __init__(self, pid: int, config: dict) -> None:
        res = inject(pid, timeout=20, require_torch=False)
        if not res.ok or not res.socket_path:
            raise SystemExit(f"injection failed: {res.kind}: {res.reason}")
        self.sock = P.connect(res.socket_path, timeout=10)
        configure = {"cmd": "configure", "stage_functions": RULES, **config}
        for msg in ({"cmd": "hello", "client": "bench"}, configure, {"cmd": "start"}):
            P.send_msg(self.sock, msg)
        self.messages = 0
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        try:
            while True:
                P.recv_msg(self.sock)
                self.messages += 1
        except (OSError, P.ProtocolError):
            pass

    def close(self) -> None:
        try:
            P.send_msg(self.sock, {"cmd": "detach"})
        except OSError:
            pass
        self.sock.close()


def phase(python: str, mode: str, seconds: float, tmp: str, cores: tuple[int, int]) -> dict:
    procs, counters = [], []
    for i, core in enumerate(cores):
        c = tempfile.mktemp(suffix=f"-{i}.json", dir=tmp)  # new each phase: no stale counter
        counters.append(c)
        procs.append(subprocess.Popen(
            ["taskset", "-c", str(core), python, str(ROOT / "benchmarks" / "tail_target.py"),
             "--counter", c, "--loop"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        ))  # fmt: skip
    try:
        for c in counters:
            count(c)
        session = Session(procs[0].pid, MODES[mode]) if MODES[mode] is not None else None
        time.sleep(2.0)  # past the injection and the stage functions' lookup
        before = [(count(c), cpu_s(p.pid)) for c, p in zip(counters, procs)]
        time.sleep(seconds)
        after = [(count(c), cpu_s(p.pid)) for c, p in zip(counters, procs)]
        if session is not None:
            session.close()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    out = []
    for ((t0, n0), c0), ((t1, n1), c1) in zip(before, after):
        out.append(((n1 - n0) / (t1 - t0), (n1 - n0) / max(1e-9, c1 - c0)))
    (rate_a, eff_a), (rate_b, eff_b) = out
    return {"rate": rate_a / rate_b, "per_cpu": eff_a / eff_b}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--phase", type=float, default=20.0)
    ap.add_argument("--python", default="/root/.pyenv/versions/3.12.1/bin/python")
    args = ap.parse_args()
    results: dict[str, list[dict]] = {m: [] for m in MODES}
    names = list(MODES)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            cores = (0, 1) if r % 2 == 0 else (1, 0)
            order = names[r % len(names):] + names[: r % len(names)]
            for mode in order:
                got = phase(args.python, mode, args.phase, tmp, cores)
                results[mode].append(got)
                print(f"round {r + 1} {mode:>9}: throughput {got['rate']:.3f}  per CPU-second {got['per_cpu']:.3f}", flush=True)
    print("\n| mode | throughput ratio to the twin (median) | per CPU-second (median) | per round (throughput) |")
    print("|---|---:|---:|---|")
    for mode in names:
        rs = results[mode]
        print(f"| {mode} | {statistics.median(x['rate'] for x in rs):.3f} | "
              f"{statistics.median(x['per_cpu'] for x in rs):.3f} | "
              f"{', '.join(format(x['rate'], '.3f') for x in rs)} |")  # fmt: skip


if __name__ == "__main__":
    main()
