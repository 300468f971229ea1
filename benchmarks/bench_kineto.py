"""infertop's trace report vs Holistic Trace Analysis on the same trace, side by side.

HTA (PyPI ``holistictraceanalysis``, pandas-based) is the reference analysis. It is a
bench-only dependency, installed in its own venv so it never touches infertop's:

    make .venv-hta/.installed       # requirements-hta.txt
    python benchmarks/bench_kineto.py [--trace tests/data/traces/a100_80gb_rank0.json.gz]
                                       [--hta-python .venv-hta/bin/python] [--repeat 3]

Measures wall time of whole processes (start-up included, as a user runs them):
HTA loading the trace and computing its temporal breakdown; `infertop report --format json`
(parse + GPU breakdown + ops + findings).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HTA_SCRIPT = """
import sys, time, logging
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
analyzer.get_temporal_breakdown(visualize=False)
t2 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f}")
"""


def timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return dt, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=str(ROOT / "tests/data/traces/a100_80gb_rank0.json.gz"))
    ap.add_argument("--hta-python", default=str(ROOT / ".venv-hta" / "bin" / "python"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="infertop-bench-")
    # HTA wants a directory of rank traces, uncompressed or gzipped, named *.json(.gz)
    shutil.copy(args.trace, os.path.join(tmp, "rank0.json.gz"))
    ours, hta, hta_parts = [], [], []
    for _ in range(args.repeat):  # interleaved
        dt, _ = timed([sys.executable, "-m", "infertop", "report", args.trace, "--format", "json"])
        ours.append(dt)
        if Path(args.hta_python).exists():
            dt, out = timed([args.hta_python, "-c", HTA_SCRIPT, tmp])
            hta.append(dt)
            hta_parts.append(tuple(float(x) for x in out.split()[-2:]))
    print(f"trace: {args.trace}")
    print(f"infertop report (whole process): median {statistics.median(ours):.2f} s  runs {', '.join(f'{x:.2f}' for x in ours)}")
    if hta:
        load = statistics.median(p[0] for p in hta_parts)
        brk = statistics.median(p[1] for p in hta_parts)
        print(f"HTA load + temporal breakdown (whole process): median {statistics.median(hta):.2f} s "
              f"(inside: load {load:.2f} s + breakdown {brk:.2f} s)")
        print(f"speed-up: {statistics.median(hta) / statistics.median(ours):.1f}x whole process, "
              f"{(load + brk) / statistics.median(ours):.1f}x against HTA's in-process time")
    else:
        print(f"HTA not found at {args.hta_python}: see the docstring to install it")


if __name__ == "__main__":
    main()
