"""Recording size and time to open: a real recording stretched to an hour.

Takes a real recording (default: records the text-generation sample for 60 s), then writes
an hour-long recording by repeating its sample windows with shifted times, and measures:
bytes per minute, time to read the file, and time to the first frame of replay (reading,
building the session, building the first snapshot — what `infertop replay` does before
drawing).

    python benchmarks/bench_recording.py [--source FILE] [--minutes 60]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infertop.analysis.snapshot import build_snapshot  # noqa: E402
from infertop.config import Config  # noqa: E402
from infertop.model.events import SampleWindow  # noqa: E402
from infertop.record.reader import read_recording  # noqa: E402
from infertop.record.writer import RecordingWriter  # noqa: E402
from infertop.sources import ReplaySource  # noqa: E402


def record_sample(path: str, seconds: int) -> None:
    target = subprocess.Popen([sys.executable, "-m", "samples.textgen_service"], cwd=ROOT,
                              stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        time.sleep(3)
        subprocess.run([sys.executable, "-m", "infertop", "record", str(target.pid), "-o", path,
                        "--duration", str(seconds)], check=True, capture_output=True)  # fmt: skip
    finally:
        target.terminate()
        target.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", help="a real recording to stretch (default: record one)")
    ap.add_argument("--minutes", type=float, default=60.0)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="infertop-bench-")
    src_path = args.source or os.path.join(tmp, "real.infertop")
    if not args.source:
        record_sample(src_path, 60)
    real = read_recording(src_path)
    windows = [e for e in real.events if isinstance(e, SampleWindow)]
    head = [e for e in real.events if not isinstance(e, SampleWindow)]
    span = windows[-1].t_end - windows[0].t_start
    real_size = os.path.getsize(src_path)
    print(f"real recording: {span:.0f} s, {len(windows)} windows, {real_size / 1024:.0f} KiB "
          f"= {real_size / 1024 / (span / 60):.0f} KiB/min")

    long_path = os.path.join(tmp, "hour.infertop")
    w = RecordingWriter(long_path)
    w.write(head)
    target_s = args.minutes * 60
    shift, n = 0.0, 0
    while shift < target_s:
        w.write([replace(x, t_start=x.t_start + shift, t_end=x.t_end + shift) for x in windows])
        shift += span
        n += len(windows)
    w.close()
    size = os.path.getsize(long_path)
    print(f"stretched: {args.minutes:g} min, {n} windows, {size / 2**20:.1f} MiB")

    import resource

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    rec = read_recording(long_path)
    t1 = time.perf_counter()
    replay = ReplaySource(rec, Config())
    t2 = time.perf_counter()
    snap = build_snapshot(replay.session, t=replay.t)
    t3 = time.perf_counter()
    print(f"read {t1 - t0:.2f} s + session {t2 - t1:.2f} s + first snapshot {t3 - t2:.2f} s "
          f"= first frame after {t3 - t0:.2f} s ({snap.samples} samples)")
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"replay's memory: peak RSS {rss0:.0f} MiB before reading, {rss1:.0f} MiB with the hour "
          f"open (a replay keeps every event of the file: it is not bounded, the file is)")


if __name__ == "__main__":
    main()
