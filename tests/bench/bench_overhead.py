"""What attaching infertop costs the target, and what infertop itself uses.

Runs the text-generation sample once and measures its throughput in interleaved phases —
detached, attached (`infertop record` at default settings), detached, attached, ... — so slow
drifts of the machine hit both sides alike. Prints a table and the ratio attached/detached.
While attached it also measures infertop's own CPU (infertop + its py-spy children) and peak
memory.

    python tests/bench/bench_overhead.py [--rounds 4] [--phase 8] [--sample textgen_service]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def read_requests(path: str) -> tuple[float, int]:
    for _ in range(100):
        try:
            with open(path) as fh:
                d = json.load(fh)
            return float(d["written"]), int(d["requests"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)
    raise RuntimeError("no truth file")


def throughput_over(path: str, seconds: float) -> float:
    t0, r0 = read_requests(path)
    time.sleep(seconds)
    t1, r1 = read_requests(path)
    return (r1 - r0) / (t1 - t0)


def tree_cpu(proc: psutil.Process) -> tuple[float, int]:
    """CPU seconds of a process and its children, and their summed RSS."""
    cpu, rss = 0.0, 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system + t.children_user + t.children_system
            rss += p.memory_info().rss
        except psutil.Error:
            pass
    return cpu, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--phase", type=float, default=8.0, help="seconds per measured phase")
    ap.add_argument("--sample", default="textgen_service")
    ap.add_argument("--sample-arg", action="append", default=[])
    ap.add_argument("--rate", type=float, default=None, help="infertop --rate (default: its default)")
    ap.add_argument("--infertop-arg", action="append", default=[], help="extra infertop argument")
    ap.add_argument("--tool", choices=("infertop", "py-spy"), default="infertop",
                    help="what to attach: infertop record, or plain py-spy record for reference")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="infertop-bench-")
    truth = os.path.join(tmp, "truth.json")
    target = subprocess.Popen(
        [sys.executable, "-m", f"samples.{args.sample}", "--truth", truth, *args.sample_arg],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(6)  # start-up and warm-up
        results: dict[str, list[float]] = {"detached": [], "attached": []}
        cpu_shares, rss_peaks = [], []
        for i in range(args.rounds):
            order = ("detached", "attached") if i % 2 == 0 else ("attached", "detached")
            for mode in order:
                rec = None
                if mode == "attached":
                    rate = [] if args.rate is None else ["--rate", f"{args.rate:g}"]
                    if args.tool == "infertop":
                        cmd = [sys.executable, "-m", "infertop", "record", str(target.pid),
                               "-o", os.path.join(tmp, f"r{i}.infertop"),
                               "--duration", str(args.phase + 3), *rate, *args.infertop_arg]
                    else:
                        cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "--pid",
                               str(target.pid), "--format", "raw", "--threads", "-o",
                               os.path.join(tmp, f"p{i}.txt"), "--duration",
                               str(int(args.phase + 3)), *rate]
                    rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.5)  # let it attach
                    ps = psutil.Process(rec.pid)
                    c0, _ = tree_cpu(ps)
                    w0 = time.monotonic()
                tput = throughput_over(truth, args.phase)
                results[mode].append(tput)
                if rec is not None:
                    c1, rss = tree_cpu(ps)
                    cpu_shares.append((c1 - c0) / (time.monotonic() - w0))
                    rss_peaks.append(rss)
                    rec.wait(timeout=30)
                else:
                    time.sleep(1.0)
                print(f"round {i + 1} {mode:9s} {tput:8.2f} req/s", flush=True)
    finally:
        target.terminate()
        target.wait(timeout=15)
    det = statistics.mean(results["detached"])
    att = statistics.mean(results["attached"])
    print()
    print(f"sample: {args.sample} {' '.join(args.sample_arg)}  rounds: {args.rounds}  phase: {args.phase:g} s"
          f"  attached: {args.tool} rate {args.rate or 'default'}")
    print(f"detached  mean {det:8.2f} req/s  (runs: {', '.join(f'{x:.1f}' for x in results['detached'])})")
    print(f"attached  mean {att:8.2f} req/s  (runs: {', '.join(f'{x:.1f}' for x in results['attached'])})")
    paired = [a / d for a, d in zip(results["attached"], results["detached"])]
    print(f"ratio attached/detached: {att / det:.3f} of means, {statistics.median(paired):.3f} "
          f"median of per-round ratios   (goal >= 0.97)")
    print(
        f"{args.tool} while attached: CPU {100 * statistics.mean(cpu_shares):.1f}% of one core "
        f"(with its py-spy), memory {max(rss_peaks) / 2**20:.0f} MiB RSS"
    )


if __name__ == "__main__":
    main()
