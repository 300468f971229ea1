"""Stress of recording real Hugging Face generate services on Python 3.11: do they survive?
(not collected)

    python scripts/stress/stress_record_textgen.py [--targets 3] [--rounds 4] [--duration 15]
        [-- RECORD-ARGS]

Each round starts ``--targets`` copies of ``samples/textgen_service.py --hf`` (``.venv``'s
Python, 3.11 here), waits for each to serve (its ``--truth`` file), records all of them at once
with ``infertop record PID --duration S`` (plus RECORD-ARGS, e.g. ``--call-samples 1000``, which
reads the threads' stacks ten times as often as the default), then checks each target is alive.
Exit status 0: every target survived; 1: one did not (its exit code printed; a segfault shows in
the kernel log as ``segfault ... in libpython3.11``).

Measured on the 2-core dev machine (2026-12-07, CPython 3.11.7, docs/performance.md): with the
call sampler's walk in a Python loop and the census holding the collector's list, 2 of 12
targets died at ``--call-samples 1000`` (SIGSEGV in ``PyFrame_GetBack``); with safe_reads.py,
none of 36.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY311 = ROOT / ".venv" / "bin" / "python"


def _start(folder: Path, i: int) -> tuple[subprocess.Popen, Path]:
    truth = folder / f"truth{i}.json"
    log = open(folder / f"target{i}.log", "w")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen(
        [str(PY311), "-m", "samples.textgen_service", "--hf", "--truth", str(truth),
         "--duration", "120"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    return proc, truth


def _round(folder: Path, n: int, duration: float, extra: list[str]) -> list[int]:
    """The exit codes of the targets that died in one round."""
    targets = [_start(folder, i) for i in range(n)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(t.exists() for _, t in targets):
        time.sleep(0.5)
    records = [
        subprocess.Popen(
            [str(PY311), "-m", "infertop", "record", str(p.pid), "--duration", str(duration),
             "-o", str(folder / f"rec{p.pid}.infertop"), *extra],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for p, _ in targets
    ]  # fmt: skip
    for r in records:
        r.wait(timeout=duration + 120)
    dead = []
    for p, _ in targets:
        if p.poll() is not None:
            dead.append(p.returncode)
        else:
            os.killpg(p.pid, signal.SIGTERM)
    for p, _ in targets:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    return dead


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--duration", type=float, default=15.0)
    ap.add_argument("record_args", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    extra = [a for a in args.record_args if a != "--"]
    died = total = 0
    with tempfile.TemporaryDirectory(prefix="infertop-stress-") as tmp:
        for r in range(args.rounds):
            dead = _round(Path(tmp), args.targets, args.duration, extra)
            died += len(dead)
            total += args.targets
            print(f"round {r + 1}: {len(dead)} died {dead}; {died} of {total} so far", flush=True)
    return 1 if died else 0


if __name__ == "__main__":
    sys.exit(main())
