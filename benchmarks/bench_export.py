"""Export speed and memory on a synthetic busy recording (8 threads, 12 deep stacks each per 1 s
window, an op window every 10 s): events written per second, output size, and peak Python
memory (tracemalloc, a second run) for Chrome (plain and gzip) and speedscope.

    .venv/bin/python benchmarks/bench_export.py [WINDOWS]     # 1600 windows ≈ 1.7M events
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infertop.export.run import export
from tests.support.recordings import write_busy


def main() -> None:
    windows = int(sys.argv[1]) if len(sys.argv) > 1 else 1600
    with tempfile.TemporaryDirectory() as d:
        rec = write_busy(os.path.join(d, "busy.infertop"), windows)
        print(f"recording: {windows} windows, {os.path.getsize(rec) / 1e6:.1f} MB")
        for fmt, name in (
            ("chrome", "t.json"),
            ("chrome", "t.json.gz"),
            ("speedscope", "t.speedscope.json"),
        ):
            out = os.path.join(d, name)
            t = time.perf_counter()
            res = export(rec, fmt, out)
            dt = time.perf_counter() - t
            tracemalloc.start()
            export(rec, fmt, out)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            print(f"{fmt:<10} {name:<18} {res.events:>10,} events  {dt:6.2f} s  "
                  f"{res.events / dt / 1e3:7.0f} k events/s  {os.path.getsize(out) / 1e6:8.1f} MB  "
                  f"peak {peak / 1e6:.1f} MB")  # fmt: skip


if __name__ == "__main__":
    main()
