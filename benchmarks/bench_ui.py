"""UI responsiveness and infertop's own cost while attached to a busy 8-thread target.

Runs the real live app (headless Textual driver, real py-spy, real aggregation) against
benchmarks/busy_target.py and measures, side by side in one run:
  - UI loop: a 20 Hz heartbeat timer on the app — achieved rate and worst stall;
  - snapshots drawn per second;
  - key latency: time for the app to handle a key press (p50 / p95 / max);
  - infertop's CPU (this process + py-spy) and memory.

    python benchmarks/bench_ui.py [--seconds 30] [--threads 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infertop.collect.target import inspect_target  # noqa: E402
from infertop.config import Config  # noqa: E402
from infertop.sources import LiveSource  # noqa: E402
from infertop.tui.app import create_app  # noqa: E402


def tree_cpu() -> tuple[float, float]:
    """CPU seconds of this process, and of its py-spy children (finished ones included)."""
    me = psutil.Process()
    t = me.cpu_times()
    kids = t.children_user + t.children_system
    for p in me.children(recursive=True):
        try:
            if p.name() != "py-spy":
                continue  # the busy target is our child too
            c = p.cpu_times()
            kids += c.user + c.system
        except psutil.Error:
            pass
    return t.user + t.system, kids


async def measure(pid: int, seconds: float) -> dict[str, float]:
    src = LiveSource(inspect_target(pid), Config())
    app = create_app(src, title="bench")
    beats: list[float] = []
    drawn: list[float] = []
    take = app.worker.take

    def counting():  # type: ignore[no-untyped-def]
        snap = take()
        if snap is not None:
            drawn.append(time.monotonic())
        return snap

    app.worker.take = counting  # type: ignore[method-assign]
    key_ms: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        app.set_interval(0.05, lambda: beats.append(time.monotonic()))
        await pilot.pause(3.0)  # attach and first windows
        beats.clear()
        drawn.clear()
        cpu0, t0 = tree_cpu(), time.monotonic()
        keys = ["s", "down", "enter", "escape", "p", "p", "up"]
        i = 0
        while time.monotonic() - t0 < seconds:
            k0 = time.perf_counter()
            await pilot.press(keys[i % len(keys)])
            key_ms.append(1000 * (time.perf_counter() - k0))
            i += 1
            await pilot.pause(0.5)
        elapsed = time.monotonic() - t0
        cpu1 = tree_cpu()
        cpu = (cpu1[0] - cpu0[0]) / elapsed
        cpu_pyspy = (cpu1[1] - cpu0[1]) / elapsed
        rss = psutil.Process().memory_info().rss
    gaps = [b - a for a, b in zip(beats, beats[1:])]
    key_ms.sort()
    return {
        "heartbeat_hz": len(beats) / elapsed,
        "worst_stall_ms": 1000 * max(gaps) if gaps else 0.0,
        "snapshots_per_s": len(drawn) / elapsed,
        "key_p50_ms": statistics.median(key_ms),
        "key_p95_ms": key_ms[int(0.95 * (len(key_ms) - 1))],
        "key_max_ms": key_ms[-1],
        "cpu_share": cpu,
        "cpu_pyspy": cpu_pyspy,
        "rss_mib": rss / 2**20,
        "samples": sum(w.active for w in src.session.windows),
        "stacks": len(src.session.symbols.stacks),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    target = subprocess.Popen([sys.executable, str(ROOT / "benchmarks/busy_target.py"), str(args.threads)])
    try:
        time.sleep(1.5)
        r = asyncio.run(measure(target.pid, args.seconds))
    finally:
        target.kill()
    print(f"busy target: {args.threads} threads; {args.seconds:g} s attached; "
          f"{r['samples']:.0f} samples, {r['stacks']:.0f} distinct stacks")
    print(f"UI heartbeat (asked 20 Hz): {r['heartbeat_hz']:.1f} Hz, worst stall {r['worst_stall_ms']:.0f} ms")
    print(f"snapshots drawn: {r['snapshots_per_s']:.2f}/s")
    print(f"key handling: p50 {r['key_p50_ms']:.1f} ms, p95 {r['key_p95_ms']:.1f} ms, max {r['key_max_ms']:.1f} ms")
    print(f"infertop CPU: UI + ingest {100 * r['cpu_share']:.1f}%, py-spy {100 * r['cpu_pyspy']:.1f}% "
          f"of one core; RSS {r['rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
