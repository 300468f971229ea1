"""What ``[collect] realtime = true`` costs the target, by the kernel's accounting.

Starts the text-generation sample (by default with the Rust tokenizer, whose pool and torch's
threads fill both cores in bursts) and rotates phases: detached, ``infertop record`` at its
defaults (py-spy at normal priority) and with a config of ``[collect] realtime = true`` (py-spy
real-time while its ticks come late: collect/priority.py). Per phase, from
``/proc/PID/task/TID/schedstat``: how long the batcher thread (the pipeline's critical path)
and all the target's threads waited on a run queue per second, and the request rate from the
sample's truth file. The detached phases are the floor.

    python benchmarks/bench_sampler_priority.py [--rounds 6] [--phase 8] [--sample-arg ARG]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infertop.collect.thread_cpu import _schedstats  # noqa: E402

MODES = ("detached", "defaults", "realtime = true")


def requests(path: str) -> int:
    for _ in range(100):
        try:
            with open(path) as fh:
                return int(json.load(fh)["requests"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)
    raise RuntimeError("no truth file")


def batcher_tid(pid: int) -> int:
    """The batcher's kernel thread id (Python's thread names stay out of the kernel's comm)."""
    dump = subprocess.run([str(Path(sys.executable).parent / "py-spy"), "dump", "--json", "--pid",
                           str(pid)], capture_output=True, text=True, check=True)  # fmt: skip
    for thread in json.loads(dump.stdout):
        if thread.get("thread_name") == "batcher":
            return int(thread["os_thread_id"])
    raise RuntimeError("no batcher thread")


def measure(pid: int, batcher: int, truth: str, seconds: float) -> dict[str, float]:
    s0, r0, t0 = _schedstats([pid]), requests(truth), time.monotonic()
    time.sleep(seconds)
    s1, r1, t1 = _schedstats([pid]), requests(truth), time.monotonic()
    wall = t1 - t0
    waited = sum(s1[t][1] - s0[t][1] for t in s1 if t in s0)
    return {
        "batcher_wait_ms_s": (s1[batcher][1] - s0[batcher][1]) / 1e6 / wall,
        "all_wait_ms_s": waited / 1e6 / wall,
        "req_s": (r1 - r0) / wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--phase", type=float, default=8.0)
    ap.add_argument("--sample-arg", action="append", default=None)
    args = ap.parse_args()
    sample_args = args.sample_arg if args.sample_arg is not None else ["--fast-tokenizer"]
    tmp = tempfile.mkdtemp(prefix="infertop-bench-")
    truth = os.path.join(tmp, "truth.json")
    target = subprocess.Popen(
        [sys.executable, "-m", "samples.textgen_service", "--truth", truth, *sample_args],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    got: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    labels = list(MODES)
    realtime = os.path.join(tmp, "realtime.toml")
    Path(realtime).write_text("[collect]\nrealtime = true\n")
    try:
        time.sleep(6)
        batcher = batcher_tid(target.pid)
        for i in range(args.rounds):
            for label in labels[i % 3 :] + labels[: i % 3]:
                rec = None
                if label != "detached":
                    cmd = [sys.executable, "-m", "infertop", "record", str(target.pid),
                           "-o", os.path.join(tmp, f"r{i}.infertop"),
                           "--duration", str(args.phase + 4)]  # fmt: skip
                    if label == "realtime = true":
                        cmd += ["--config", realtime]
                    rec = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)  # fmt: skip
                    time.sleep(2.5)  # attached, and past the first window's judgement
                m = measure(target.pid, batcher, truth, args.phase)
                got[label].append(m)
                if rec is not None:
                    rec.wait(timeout=60)
                print(f"round {i + 1} {label:18s} batcher waited {m['batcher_wait_ms_s']:6.1f} "
                      f"ms/s, all threads {m['all_wait_ms_s']:6.1f} ms/s, {m['req_s']:6.1f} req/s",
                      flush=True)  # fmt: skip
    finally:
        target.terminate()
        target.wait(timeout=30)
    print(f"\nsample: textgen_service {' '.join(sample_args)}; {args.rounds} rounds x "
          f"{args.phase:g} s; medians")
    print(f"{'mode':18s} {'batcher waited':>15s} {'all threads':>12s} {'req/s':>7s}")
    for label, rows in got.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"{label:18s} {med['batcher_wait_ms_s']:10.1f} ms/s {med['all_wait_ms_s']:7.1f} ms/s "
              f"{med['req_s']:7.1f}")


if __name__ == "__main__":
    main()
