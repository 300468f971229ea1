"""memory-growth: a process's host memory growing steadily past warm-up, told apart from warm-up,
from a cache that fills and then stays flat, and from noise; its rate, for how long, R², and the
growth per timed call. Synthetic series and recordings through the real summary, snapshot and
report code, and a real child process that leaks."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infertop.analysis.findings import RULES, FindingInput, evaluate
from infertop.analysis.host_memory import call_times, summarize_host_memory
from infertop.cli import main
from infertop.collect.host_memory import HostMemoryCollector
from infertop.config import FindingThresholds
from infertop.model.events import StageSpan, TargetInfo
from infertop.model.findings import Finding
from infertop.model.host_memory import CgroupMemory, HostMemoryReading
from infertop.record.writer import RecordingWriter

MIB = 1024**2
GIB = 1024**3


def series(
    rss_at,
    seconds: int = 45,
    pid: int = 7,
    t0: float = 1000.0,
    step: float = 1.0,
    limit: int | None = None,
) -> list[HostMemoryReading]:
    """One reading per ``step`` seconds of a process whose RSS at k seconds is ``rss_at(k)``;
    with ``limit``: in a memory cgroup of that limit, using RSS + 100 MiB."""
    out = []
    for i in range(int(seconds / step) + 1):
        k = i * step
        rss = int(rss_at(k))
        cg = None if limit is None else CgroupMemory(2, "/kubepods/pod1", limit, rss + 100 * MIB, 0)
        out.append(HostMemoryReading(t0 + k, pid, rss, rss - 40 * MIB, 30 * MIB, 10 * MIB, 0,
                                     1000 + 10 * i, 5, cg))  # fmt: skip
    return out


def growth(
    readings: list[HostMemoryReading], th: FindingThresholds | None = None
) -> Finding | None:
    s = summarize_host_memory(readings)
    procs = s.processes if s is not None else ()
    inp = FindingInput(host_memory=procs, host_memory_pids=len(procs) > 1)
    return RULES["memory-growth"](inp, th or FindingThresholds())


def warm(k: float, cache_mib: int = 300, fill_s: float = 10.0) -> float:
    """400 MiB of model and a cache of ``cache_mib`` filled over the first ``fill_s`` seconds."""
    return 400 * MIB + min(k, fill_s) / fill_s * cache_mib * MIB


def test_a_steady_leak_behind_warm_up_fires_with_its_rate() -> None:
    f = growth(series(lambda k: warm(k) + 500_000 * k))
    assert f is not None and f.rule == "memory-growth"
    ev = f.evidence
    assert ev["growth_bytes_per_s"] == pytest.approx(500_000, rel=0.02)
    assert ev["r2"] > 0.99 and ev["recent_share"] == pytest.approx(1.0, abs=0.05)
    assert ev["over_s"] == pytest.approx(45 * 0.75, abs=1.0)  # the first quarter is warm-up
    assert ev["warmup_s"] == pytest.approx(45 * 0.25, abs=1.0)
    # 0.5 MB/s is 1.68 GiB an hour: medium without a limit
    assert f.severity == "medium" and f.pid is None
    assert "grows 488.3 KiB/s (1.68 GiB/h) steadily for 33 s past warm-up (R² 1.00)" in f.title
    assert "mem" in f.hint and "tracemalloc" in f.hint
    # the same leak in a cgroup whose 2 GiB limit is 40 minutes away: high, and said
    f = growth(series(lambda k: warm(k) + 500_000 * k, limit=2 * GIB))
    assert f is not None and f.severity == "high"
    assert 1800 < f.evidence["to_limit_s"] < 3000 and "limit is 4" in f.title


@pytest.mark.parametrize("seed", range(5))
def test_a_noisy_leak_still_fires(seed: int) -> None:
    rnd = random.Random(seed)
    f = growth(series(lambda k: warm(k) + 500_000 * k + rnd.uniform(-2, 2) * MIB))
    assert f is not None
    assert f.evidence["growth_bytes_per_s"] == pytest.approx(500_000, rel=0.25)


def test_warm_up_then_flat_does_not_fire() -> None:
    # the cache fills in 10 s; 35 s flat after it
    assert growth(series(warm)) is None
    # a warm-up longer than the quarter left out (fills over 20 s of 45): flat at the end
    assert growth(series(lambda k: warm(k, 300, 20.0))) is None


@pytest.mark.parametrize("fill_s", [25.0, 30.0, 35.0])
def test_a_cache_that_fills_and_plateaus_does_not_fire(fill_s: float) -> None:
    # a cache filling at a steady rate for most of the recording, then flat: the fit past
    # warm-up rises (R² up to ~0.9), its last third does not
    readings = series(lambda k: warm(k, int(fill_s * 2), fill_s))  # 2 MiB/s while it fills
    s = summarize_host_memory(readings)
    assert s is not None
    (p,) = s.processes
    assert p.growth_bytes_per_s is not None and p.growth_bytes_per_s > 0.5 * MIB
    assert growth(readings) is None


@pytest.mark.parametrize("seed", range(10))
def test_noise_does_not_fire(seed: int) -> None:
    rnd = random.Random(seed)
    # a flat process whose RSS jitters by ±8 MiB, and one whose heap saws up and back down
    assert growth(series(lambda k: 2 * GIB + rnd.uniform(-8, 8) * MIB, 120)) is None
    assert growth(series(lambda k: 2 * GIB + (k % 7) * 4 * MIB, 120)) is None


def test_too_short_or_too_little_does_not_fire() -> None:
    # 15 s: 11 s past warm-up, under the 20 s the rule asks for
    assert growth(series(lambda k: warm(k) + 500_000 * k, 15)) is None
    # 40 KB/s for 45 s: 1.3 MB, steady but under 8 MiB grown
    assert growth(series(lambda k: 400 * MIB + 40_000 * k)) is None
    # the thresholds are the config's: 1 MiB is enough when asked
    th = FindingThresholds(memory_growth_min_bytes=1 * MIB)
    assert growth(series(lambda k: 400 * MIB + 40_000 * k), th) is not None


def test_several_processes_the_fastest_named() -> None:
    rs = sorted(
        series(lambda k: warm(k) + 500_000 * k, pid=7)
        + series(lambda k: 300 * MIB + 2 * MIB * k, pid=9)
        + series(lambda k: 200 * MIB, pid=11),
        key=lambda r: r.t,
    )
    f = growth(rs)
    assert f is not None and f.pid == 9 and f.evidence["pid"] == 9
    assert f.evidence["also_growing"] == [7] and "pid 9's memory" in f.title


def spans(
    pid_tid: int, per_s: float, seconds: int, t0: float = 1000.0, request: bool = False
) -> list[StageSpan]:
    n = int(per_s * seconds)
    return [
        StageSpan(pid_tid, "forward", t0 + i / per_s, t0 + i / per_s + 0.01,
                  request=f"r{i}" if request else None)
        for i in range(1, n)
    ]  # fmt: skip


def test_growth_per_forward_call_and_per_request() -> None:
    readings = series(lambda k: warm(k) + 500_000 * k)
    calls = call_times(spans(70, 20.0, 45), lambda tid: 7)
    (p,) = summarize_host_memory(readings, calls).processes  # type: ignore[union-attr]
    assert p.growth_call_kind == "forward" and p.growth_calls is not None and p.growth_calls > 600
    assert p.growth_per_call_bytes == pytest.approx(500_000 / 20, rel=0.05)
    inp = FindingInput(host_memory=(p,))
    (f,) = [f for f in evaluate(inp) if f.rule == "memory-growth"]
    assert "24.4 KiB per forward" in f.title and f.evidence["call"] == "forward"
    # named requests win over forward calls: 5 a second, 100 KB each
    calls = call_times(spans(70, 20.0, 45) + spans(70, 5.0, 45, request=True), lambda tid: 7)
    (p,) = summarize_host_memory(readings, calls).processes  # type: ignore[union-attr]
    assert p.growth_call_kind == "request"
    assert p.growth_per_call_bytes == pytest.approx(100_000, rel=0.05)
    # spans folded before t=1030: the rate is of the calls kept since then
    calls = call_times([s for s in spans(70, 20.0, 45) if s.t_start >= 1030], lambda tid: 7, 1030.0)
    (p,) = summarize_host_memory(readings, calls).processes  # type: ignore[union-attr]
    assert p.growth_per_call_bytes == pytest.approx(500_000 / 20, rel=0.05)
    # no calls in the process, or too few: none
    (p,) = summarize_host_memory(readings, call_times(spans(70, 0.1, 45), lambda tid: 7)).processes  # type: ignore[union-attr]
    assert p.growth_per_call_bytes is None


def _recording(path: Path, events: list) -> str:  # type: ignore[type-arg]
    w = RecordingWriter(str(path))
    w.write([TargetInfo(7, "python serve.py", "3.12.1", None, 1000.0), *events])
    w.close()
    return str(path)


def _report_json(capsys: pytest.CaptureFixture[str], path: str, *extra: str) -> dict:  # type: ignore[type-arg]
    capsys.readouterr()
    assert main(["report", path, "--format", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_recording_reports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    leak = series(lambda k: warm(k) + 500_000 * k, limit=8 * GIB)
    events = sorted(
        [*leak, *spans(70, 20.0, 45)],
        key=lambda e: e.t if isinstance(e, HostMemoryReading) else e.t_end,
    )
    rep = _report_json(capsys, _recording(tmp_path / "leak.infertop", events))
    (f,) = [f for f in rep["findings"] if f["rule"] == "memory-growth"]
    assert f["pid"] is None and f["severity"] == "medium"
    assert f["evidence"]["growth_bytes_per_s"] == pytest.approx(500_000, rel=0.02)
    (p,) = rep["memory"]["processes"]
    assert p["growth_per_call_bytes"] == pytest.approx(25_000, rel=0.05)
    assert p["growth_per_call_of"] == "forward" and p["growth_s"] == pytest.approx(34, abs=1)
    capsys.readouterr()
    assert main(["report", _recording(tmp_path / "leak2.infertop", events)]) == 0
    text = capsys.readouterr().out
    assert "memory-growth" in text and "growth_bytes_per_s 488.3 KiB/s" in text
    assert "past warm-up (24.4 KiB per forward)" in text
    # its twin with a bounded cache: flat after warm-up, no finding
    flat = series(lambda k: warm(k, 300, 15.0), limit=8 * GIB)
    rep = _report_json(capsys, _recording(tmp_path / "flat.infertop", flat))
    assert not [f for f in rep["findings"] if f["rule"] == "memory-growth"]


# -- a real process ---------------------------------------------------------------------------
LEAKS = """
import sys, time
rate = float(sys.argv[1])
warm = b"\\x01" * (40 * 1024 * 1024)  # warm-up: a model's worth, at once
sys.stdout.write("ready\\n"); sys.stdout.flush()
kept, start, leaked = [], time.monotonic(), 0
while True:
    # by the clock: behind (a busy host), it catches up, so the rate holds on average
    due = int(rate * (time.monotonic() - start))
    if due > leaked:
        kept.append(b"\\x01" * (due - leaked))  # written, so resident
        leaked = due
    time.sleep(0.02)
"""


def test_a_real_process_that_leaks_2_mb_a_second(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rate = 2_000_000
    child = subprocess.Popen(
        [sys.executable, "-c", LEAKS, str(rate)], stdout=subprocess.PIPE, text=True
    )
    collector = HostMemoryCollector(child.pid, interval=0.2)
    # a short session: 6 s past warm-up are enough here (the default asks 20)
    th = FindingThresholds(memory_growth_min_s=6.0)
    seen: list[HostMemoryReading] = []
    found: Finding | None = None
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        collector.start()
        end = time.monotonic() + 90.0
        while found is None and time.monotonic() < end:
            seen.extend(e for e in collector.poll() if isinstance(e, HostMemoryReading))
            if len(seen) >= 10:
                found = growth(seen, th)
            time.sleep(0.2)
    finally:
        collector.stop()
        child.kill()
        child.wait()
    span = seen[-1].t - seen[0].t if seen else 0.0
    assert found is not None, f"no memory-growth after {span:.0f} s of {len(seen)} readings"
    # the child's rate by its clock; a host too busy to run it on time makes it late, then it
    # catches up: a factor of 2 either way is beyond what the load can do to its average
    assert rate / 2 < found.evidence["growth_bytes_per_s"] < rate * 2, found.evidence
    assert found.evidence["r2"] >= 0.8
    # what was read, recorded, reports the same (the config's threshold given to report)
    cfg = tmp_path / "infertop.toml"
    cfg.write_text("[findings]\nmemory_growth_min_s = 6.0\n")
    path = _recording(tmp_path / "real.infertop", [HostMemoryReading(*_fields(r, 7)) for r in seen])
    rep = _report_json(capsys, path, "--config", str(cfg))
    assert [f["rule"] for f in rep["findings"] if f["rule"] == "memory-growth"] == ["memory-growth"]


def _fields(r: HostMemoryReading, pid: int) -> tuple:  # type: ignore[type-arg]
    """A reading's fields as the recording's target (pid 7)."""
    return (r.t, pid, r.rss, r.rss_anon, r.rss_file, r.rss_shmem, r.swap, r.minor_faults,
            r.major_faults, r.cgroup)  # fmt: skip
