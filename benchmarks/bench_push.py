"""What ``--push`` costs infertop, and how big one interval's push is, on the busy 8-thread
service (benchmarks/busy_target.py).

Runs ``infertop record`` on the same target in rotating rounds: plain, plain again (the noise
floor: the same run twice) and with ``--push`` to a stand-in backend on 127.0.0.1
(tests/support/push_receiver.py, answering 200). infertop's CPU is the kernel's accounting of
infertop and its py-spy (``getrusage(RUSAGE_CHILDREN)`` around each run), as a share of one
core. The push sizes are the request bodies the backend got, and the gzipped pprofs in them.

    python benchmarks/bench_push.py [--rounds 2] [--duration 32] [--interval 15]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.push_receiver import Receiver  # noqa: E402


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def record(pid: int, duration: float, extra: list[str]) -> tuple[float, str]:
    """One ``infertop record`` run: its CPU (with py-spy's) per second of the run, its stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        cpu0, t0 = children_cpu(), time.monotonic()
        p = subprocess.run(
            [sys.executable, "-m", "infertop", "record", str(pid), "-o", f"{tmp}/r.infertop",
             "--duration", str(duration), *extra],
            capture_output=True, text=True, cwd=ROOT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        cpu, wall = children_cpu() - cpu0, time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"infertop record failed:\n{p.stderr}")
    return cpu / wall, p.stderr


def synthetic(threads: int, stacks: int, depth: int, windows: int) -> tuple[int, int]:
    """One interval of a made-up service far busier in stacks than busy_target: ``threads``
    threads, ``stacks`` distinct stacks each, ``depth`` frames deep, in ``windows`` windows.
    Returns (the pprof's bytes, the Pyroscope request's bytes)."""
    from infertop.model.events import Frame, SampleWindow
    from infertop.model.pprof_build import CpuProfile
    from infertop.push.backends import Series, encode, series_labels

    frames = [Frame(f"fn_{i}", f"/srv/app/module_{i % 40}.py", 10 + i) for i in range(depth * 50)]
    table = [
        tuple((k * 7 + d * 13) % len(frames) for d in range(depth)) for k in range(stacks * threads)
    ]
    prof = CpuProfile(50.0)
    t = 1_700_000_000.0
    for w in range(windows):
        counts = tuple(
            (100 + th, th * stacks + k, 1) for th in range(threads) for k in range(stacks)
        )
        win = SampleWindow(t + w, t + w + 1, 50.0, 50, counts, 0, 0.0, threads)
        prof.add_window(win, frames, table, lambda sid, _f: ("forward", "preprocess")[sid % 2],
                        lambda tid: f"worker-{tid}")  # fmt: skip
    raw = prof.encode(t, t + windows)
    body = encode("pyroscope", [Series(series_labels("serve", "host", 4242), raw)])
    return len(raw), len(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=32.0)
    ap.add_argument("--interval", type=float, default=15.0)
    args = ap.parse_args()

    target = subprocess.Popen([sys.executable, str(ROOT / "benchmarks/busy_target.py")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(2.0)  # its threads started
    cpu: dict[str, list[float]] = {"plain": [], "plain again": [], "--push": []}
    with Receiver().start() as rx:
        push = ["--push", rx.url, "--push-interval", str(args.interval), "--push-spool", "none"]
        modes = [("plain", []), ("plain again", []), ("--push", push)]
        try:
            for r in range(args.rounds):
                for name, extra in modes[r % 3 :] + modes[: r % 3]:
                    share, err = record(target.pid, args.duration, extra)
                    cpu[name].append(share)
                    print(f"round {r + 1} {name:12s} infertop CPU {share * 100:5.1f} % of a core",
                          flush=True)  # fmt: skip
                    if name == "--push":
                        print("   ", err.strip().splitlines()[-1], flush=True)
        finally:
            target.kill()
            target.wait()
        got = rx.taken()
    bodies = [len(g.body) for g in got]
    pprofs = [len(raw) for g in got for _labels, raws in g.series() for raw in raws]
    print()
    print("| run | infertop CPU, share of one core (mean of rounds) |")
    print("|---|---:|")
    for name, values in cpu.items():
        print(f"| {name} | {statistics.mean(values) * 100:.1f} % |")
    print()
    full = sorted(bodies)[-max(1, len(bodies) // 2) :]  # the full intervals (the last is part)
    print(f"pushes: {len(got)}; request body max {max(bodies) / 1024:.1f} KiB, "
          f"median of the larger half {statistics.median(full) / 1024:.1f} KiB; "
          f"pprof (gzipped) max {max(pprofs) / 1024:.1f} KiB")  # fmt: skip
    doc = json.loads(got[0].body)
    raw = base64.b64decode(doc["series"][0]["samples"][0]["rawProfile"])
    out = os.path.join(tempfile.gettempdir(), "bench_push_first.pb.gz")
    Path(out).write_bytes(raw)
    print(f"first pushed pprof written to {out} (go tool pprof -raw {out})")
    print()
    print("| synthetic interval (8 threads, 15 windows) | pprof | Pyroscope request |")
    print("|---|---:|---:|")
    for stacks, depth in ((50, 20), (200, 30), (500, 40)):
        raw, body = synthetic(8, stacks, depth, 15)
        print(f"| {stacks} distinct stacks per thread, {depth} deep | {raw / 1024:.1f} KiB | "
              f"{body / 1024:.1f} KiB |")  # fmt: skip


if __name__ == "__main__":
    main()
