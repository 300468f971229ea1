"""What the in-process agent costs the target, beside no profiling and continuous torch.profiler.

One run, several modes, each on a fresh process of the same sample, in rotating order per round
(so slow drifts of the machine spread over all modes):

- ``none``        the sample alone;
- ``agent``       the agent injected into it (``infertop.agent.inject``), profiling at the
                  defaults infertop uses (a 0.25 s torch.profiler window every 10 s), no py-spy;
- ``infertop``    ``infertop record PID --inject``: py-spy at 100 Hz and the agent, as a user runs it;
- ``continuous``  one ``torch.profiler.profile()`` held around the whole run
                  (tests/bench/profiled_launch.py), CPU ops on all threads.

Each phase waits for the sample to serve, then measures its request rate over ``--phase``
seconds (several agent windows: its cost comes in bursts). Prints req/s per mode and the ratio
to ``none``.

    python tests/bench/bench_agent.py [--rounds 2] [--phase 30] [--sample textgen_service]
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_overhead import read_requests, throughput_over  # noqa: E402

from infertop.agent import protocol as P  # noqa: E402
from infertop.agent.inject import inject  # noqa: E402
from infertop.collect.agent_client import AgentConfig  # noqa: E402

MODES = ("none", "agent", "infertop", "continuous")


def start_sample(mode: str, sample: str, truth: str) -> subprocess.Popen:
    pre = [str(ROOT / "tests" / "bench" / "profiled_launch.py")] if mode == "continuous" else ["-m"]
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


def phase(mode: str, sample: str, seconds: float, tmp: str, i: int) -> float:
    truth = os.path.join(tmp, f"{mode}-{i}.json")
    proc = start_sample(mode, sample, truth)
    extra = None
    try:
        deadline = time.time() + 60
        while time.time() < deadline:  # serving (every thread up, torch imported)
            try:
                if read_requests(truth)[1] >= 5:
                    break
            except RuntimeError:
                pass
            time.sleep(0.2)
        time.sleep(2)
        if mode == "agent":
            extra = AgentSession(proc.pid)
        elif mode == "infertop":
            extra = subprocess.Popen(
                [sys.executable, "-m", "infertop", "record", str(proc.pid), "--inject",
                 "-o", os.path.join(tmp, f"r{i}.infertop"), "--duration", str(seconds + 10)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        if extra is not None:
            time.sleep(3)  # attached and the first window past
        return throughput_over(truth, seconds)
    finally:
        if isinstance(extra, subprocess.Popen):
            extra.terminate()
            extra.wait(timeout=30)
        elif extra is not None:
            extra.close()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
            rate = phase(mode, args.sample, args.phase, tmp, r)
            results[mode].append(rate)
            print(f"round {r + 1} {mode:10s} {rate:8.2f} req/s", flush=True)
    base = statistics.median(results["none"]) if results.get("none") else None
    print(f"\nsample: {args.sample}  rounds: {args.rounds}  phase: {args.phase:g} s  "
          f"agent: {AgentConfig().window_s:g} s window every {AgentConfig().period_s:g} s")
    for mode in modes:
        med = statistics.median(results[mode])
        ratio = f"{med / base:.3f} of none" if base else ""
        runs = ", ".join(f"{x:.1f}" for x in results[mode])
        print(f"{mode:10s} median {med:8.2f} req/s  {ratio:16s} (runs: {runs})")


if __name__ == "__main__":
    main()
