"""What the in-process agent costs the target, beside no profiling and continuous torch.profiler.

One run, several modes, in rotating order per round. Each phase starts two fresh processes of
the same sample side by side, the one under test and a plain twin, and measures both request
rates over the same seconds: the machine's swings hit both alike, and the ratio is the cost.

- ``none``        nothing attached (the ratio of two plain twins: the noise floor);
- ``agent``       the agent injected (``infertop.agent.inject``), profiling at infertop's
                  defaults (a 0.25 s torch.profiler window every 10 s), no py-spy;
- ``infertop``    ``infertop record PID`` as a user runs it: py-spy at its default rate and the agent;
- ``continuous``  one ``torch.profiler.profile()`` held around the whole run
                  (benchmarks/profiled_launch.py), CPU ops on all threads.

The phase starts once both serve, and is long enough for several agent windows (its cost
comes in bursts).

    python benchmarks/bench_agent.py [--rounds 2] [--phase 30] [--sample textgen_service]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_overhead import read_requests  # noqa: E402

from infertop.agent import protocol as P  # noqa: E402
from infertop.agent.inject import inject  # noqa: E402
from infertop.collect.agent.client import AgentConfig  # noqa: E402

MODES = ("none", "agent", "infertop", "continuous")


def start_sample(mode: str, sample: str, truth: str) -> subprocess.Popen:
    pre = [str(ROOT / "benchmarks" / "profiled_launch.py")] if mode == "continuous" else ["-m"]
    return subprocess.Popen(
        [sys.executable, *pre, f"samples.{sample}", "--truth", truth],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


class AgentSession:
    """Inject the agent and keep it profiling at infertop's defaults; a thread reads (and drops)
    what it sends, as a client would."""

    def __init__(self, pid: int) -> None:
        import socket
        import threading

        result = inject(pid, timeout=10)
        if not result.ok:
            raise SystemExit(f"injection failed: {result.kind}: {result.reason}")
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(P.socket_path(pid, os.geteuid()))
        for msg in ({"cmd": "hello", "client": "bench"}, AgentConfig().message(), {"cmd": "start"}):
            P.send_msg(self.sock, msg)
        self.windows = 0
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        try:
            while True:
                if P.recv_msg(self.sock).get("type") == "window":
                    self.windows += 1
        except (OSError, P.ProtocolError):
            pass

    def close(self) -> None:
        try:
            P.send_msg(self.sock, {"cmd": "detach"})
        except OSError:
            pass
        self.sock.close()


def wait_serving(truth: str) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:  # serving (every thread up, torch imported)
        try:
            if read_requests(truth)[1] >= 5:
                return
        except RuntimeError:
            pass
        time.sleep(0.2)


def rates_over(paths: list[str], seconds: float) -> list[float]:
    """Request rates of several samples over the same interval."""
    before = [read_requests(p) for p in paths]
    time.sleep(seconds)
    after = [read_requests(p) for p in paths]
    return [(r1 - r0) / (t1 - t0) for (t0, r0), (t1, r1) in zip(before, after)]


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def phase(mode: str, sample: str, seconds: float, tmp: str, i: int) -> tuple[float, float]:
    """(rate of the sample in ``mode``, rate of a plain twin run beside it over the same time)."""
    truth, twin_truth = (os.path.join(tmp, f"{mode}-{i}{x}.json") for x in ("", "-twin"))
    proc = start_sample(mode, sample, truth)
    twin = start_sample("none", sample, twin_truth)
    extra = None
    try:
        wait_serving(truth)
        wait_serving(twin_truth)
        time.sleep(2)
        if mode == "agent":
            extra = AgentSession(proc.pid)
        elif mode == "infertop":
            extra = subprocess.Popen(
                [sys.executable, "-m", "infertop", "record", str(proc.pid),
                 "-o", os.path.join(tmp, f"r{i}.infertop"), "--duration", str(seconds + 10)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        if extra is not None:
            time.sleep(3)  # attached and the first window past
        rate, twin_rate = rates_over([truth, twin_truth], seconds)
        return rate, twin_rate
    finally:
        if isinstance(extra, subprocess.Popen):
            extra.terminate()
            extra.wait(timeout=30)
        elif extra is not None:
            extra.close()
        stop(proc)
        stop(twin)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--phase", type=float, default=30.0, help="seconds measured per phase")
    ap.add_argument("--sample", default="textgen_service")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ", ".join(MODES))
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    tmp = tempfile.mkdtemp(prefix="infertop-bench-agent-")
    results: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.rounds):
        order = modes[r % len(modes):] + modes[: r % len(modes)]
        for mode in order:
            rate, twin = phase(mode, args.sample, args.phase, tmp, r)
            results[mode].append(rate / twin)
            print(f"round {r + 1} {mode:10s} {rate:8.2f} req/s  twin {twin:8.2f} req/s  "
                  f"ratio {rate / twin:.3f}", flush=True)
    print(f"\nsample: {args.sample}  rounds: {args.rounds}  phase: {args.phase:g} s  "
          f"agent: {AgentConfig().window_s:g} s window every {AgentConfig().period_s:g} s")
    print("ratio: throughput of the sample in that mode / a plain twin's over the same seconds "
          "(none: two plain twins, the noise floor)")
    for mode in modes:
        runs = ", ".join(f"{x:.3f}" for x in results[mode])
        print(f"{mode:10s} median ratio {statistics.median(results[mode]):.3f}  (runs: {runs})")


if __name__ == "__main__":
    main()
