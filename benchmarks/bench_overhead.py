"""What attaching infertop costs the target, and what infertop itself uses.

Runs the text-generation sample once and measures its throughput in interleaved phases —
detached, attached (`infertop record` at default settings), detached, attached, ... — so slow
drifts of the machine hit both sides alike. Prints a table and the ratio attached/detached.
While attached it also measures infertop's own CPU (infertop + its py-spy children) and peak
memory.

    python benchmarks/bench_overhead.py [--rounds 4] [--phase 8] [--sample textgen_service]

Several settings side by side in one run (each round runs detached and every mode, in an order
that rotates from round to round; every mode's ratio is to the detached phases of its rounds):

    python benchmarks/bench_overhead.py --mode "infertop=infertop" \
        --mode "infertop 50 Hz=infertop:--rate 50" --mode "py-spy 100 Hz=py-spy:--rate 100"
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

ROOT = Path(__file__).resolve().parents[1]


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


def attach_command(tool: str, extra: list[str], pid: int, out: str, seconds: float) -> list[str]:
    if tool == "infertop":
        return [sys.executable, "-m", "infertop", "record", str(pid), "-o", out + ".infertop",
                "--duration", str(seconds), *extra]  # fmt: skip
    return [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid),
            "--format", "raw", "--threads", "-o", out + ".txt", "--duration",
            str(int(seconds)), *extra]  # fmt: skip


def parse_mode(text: str) -> tuple[str, str, list[str]]:
    """``LABEL=TOOL[:ARG ARG ...]`` → (label, tool, args)."""
    label, _, spec = text.partition("=")
    tool, _, rest = (spec or label).partition(":")
    if tool not in ("infertop", "py-spy"):
        raise SystemExit(f"--mode {text!r}: the tool is infertop or py-spy")
    return label, tool, rest.split()


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
    ap.add_argument("--mode", action="append", default=[],
                    help="LABEL=TOOL[:ARGS]: several settings side by side (repeatable)")
    args = ap.parse_args()
    if args.mode:
        modes = [parse_mode(m) for m in args.mode]
    else:
        rate = [] if args.rate is None else ["--rate", f"{args.rate:g}"]
        modes = [(args.tool, args.tool, rate + (args.infertop_arg if args.tool == "infertop" else []))]

    tmp = tempfile.mkdtemp(prefix="infertop-bench-")
    truth = os.path.join(tmp, "truth.json")
    target = subprocess.Popen(
        [sys.executable, "-m", f"samples.{args.sample}", "--truth", truth, *args.sample_arg],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    labels = ["detached"] + [m[0] for m in modes]
    results: dict[str, list[float]] = {label: [] for label in labels}
    cpu_shares: dict[str, list[float]] = {m[0]: [] for m in modes}
    rss_peaks: dict[str, list[int]] = {m[0]: [] for m in modes}
    try:
        time.sleep(6)  # start-up and warm-up
        for i in range(args.rounds):
            k = i % len(labels)
            order = labels[k:] + labels[:k] if len(labels) > 2 else (
                labels if i % 2 == 0 else labels[::-1])
            for label in order:
                rec = None
                if label != "detached":
                    _, tool, extra = next(m for m in modes if m[0] == label)
                    out = os.path.join(tmp, f"r{i}-{labels.index(label)}")
                    cmd = attach_command(tool, extra, target.pid, out, args.phase + 3)
                    rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.5)  # let it attach
                    ps = psutil.Process(rec.pid)
                    c0, _ = tree_cpu(ps)
                    w0 = time.monotonic()
                tput = throughput_over(truth, args.phase)
                results[label].append(tput)
                if rec is not None:
                    c1, rss = tree_cpu(ps)
                    cpu_shares[label].append((c1 - c0) / (time.monotonic() - w0))
                    rss_peaks[label].append(rss)
                    rec.wait(timeout=30)
                else:
                    time.sleep(1.0)
                print(f"round {i + 1} {label:18s} {tput:8.2f} req/s", flush=True)
    finally:
        target.terminate()
        target.wait(timeout=15)
    det = statistics.mean(results["detached"])
    print()
    print(f"sample: {args.sample} {' '.join(args.sample_arg)}  rounds: {args.rounds}  "
          f"phase: {args.phase:g} s   (goal: ratio >= 0.97)")  # fmt: skip
    print(f"{'detached':18s} mean {det:8.2f} req/s  "
          f"(runs: {', '.join(f'{x:.1f}' for x in results['detached'])})")  # fmt: skip
    for label, tool, extra in modes:
        att = statistics.mean(results[label])
        paired = [a / d for a, d in zip(results[label], results["detached"])]
        print(f"{label:18s} mean {att:8.2f} req/s  ratio {att / det:.3f} of means, "
              f"{statistics.median(paired):.3f} median of per-round ratios; "
              f"{tool} CPU {100 * statistics.mean(cpu_shares[label]):.1f}% of one core, "
              f"{max(rss_peaks[label]) / 2**20:.0f} MiB RSS  [{tool} {' '.join(extra)}]")  # fmt: skip


if __name__ == "__main__":
    main()
