"""A directory of per-rank torch.profiler traces imports as one recording with a process per
rank, and a rank whose steps are consistently slower is a ``straggler`` finding.

The traces are the real ones of tests/data/traces; the slower rank is a real trace transformed
(every ts and dur stretched by 1.3 about its first event: tests/support/kineto_ranks.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from infertop.analysis.stragglers import Step, find_stragglers
from infertop.config import FindingThresholds
from infertop.model.events import OpWindow, ProcessDef, ThreadDef
from infertop.record.reader import read_recording
from tests.support.cli import Ran, run_cli
from tests.support.kineto_ranks import rank_dir


def run(*args: str) -> Ran:
    return run_cli(*args)  # in this process: main([...])


def imported(d: Path, tmp_path: Path) -> tuple[Path, dict, float]:
    out = tmp_path / "ranks.infertop"
    t = time.monotonic()
    p = run("import", str(d), "-o", str(out))
    took = time.monotonic() - t
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    rep = run("report", str(out), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    return out, json.loads(rep.stdout), took


def stragglers(rep: dict) -> list[dict]:
    return [f for f in rep["findings"] if f["rule"] == "straggler"]


def test_each_rank_is_a_process_with_its_own_windows_and_threads(tmp_path: Path) -> None:
    d = rank_dir(tmp_path, "a100_sampled_rank0", [1.0, 1.0, 1.0])
    out, rep, _ = imported(d, tmp_path)
    events = read_recording(str(out)).events
    procs = {e.pid: e for e in events if isinstance(e, ProcessDef)}
    assert len(procs) == 3 and 4037 in procs  # the trace's own pid, then remapped ones
    assert sorted(p.cmdline.split(" (")[0] for p in procs.values()) == ["rank 0", "rank 1", "rank 2"]
    assert all(p.ppid == 0 for p in procs.values())
    threads = [e for e in events if isinstance(e, ThreadDef)]
    assert {t.pid for t in threads} == set(procs)  # every rank's threads are its own ...
    assert len({t.tid for t in threads}) == len(threads)  # ... with tids unique across ranks
    windows = [e for e in events if isinstance(e, OpWindow)]
    assert {w.pid for w in windows} == set(procs)
    assert [w.t_end for w in windows] == sorted(w.t_end for w in windows)
    for w in windows:  # annotations name the rank's own threads
        assert all(a.tid in {t.tid for t in threads if t.pid == w.pid} for a in w.annotations)
    # the report: a section per rank, in rank order, each with its steps and kernels
    assert [p["role"] for p in rep["processes"]] == ["rank 0", "rank 1", "rank 2"]
    for p in rep["processes"]:
        assert p["ops"]["steps"] == 2 and p["ops"]["kernel_time_us"]["communication"] > 0
        assert p["ops"]["step_ms_p50"] > p["ops"]["step_work_ms_p50"] > 0
    assert stragglers(rep) == []  # equal ranks: no straggler
    text = run("report", str(out)).stdout
    assert "processes (3;" in text and "rank 2 (" in text and "2 steps, p50" in text


def test_a_rank_stretched_by_1_3_is_named_the_straggler(tmp_path: Path) -> None:
    d = rank_dir(tmp_path, "a100_sampled_rank0", [1.0, 1.0, 1.3])
    out, rep, took = imported(d, tmp_path)
    found = stragglers(rep)
    assert len(found) == 1, found
    f = found[0]
    slow = next(p for p in rep["processes"] if p["role"] == "rank 2")
    assert f["pid"] == slow["pid"] and f["severity"] == "high"  # 30 % slower
    assert "rank 2" in f["title"] and f["where"] == [f"rank 2 (pid {slow['pid']})"]
    ev = f["evidence"]
    assert ev["steps_compared"] == 2 and ev["steps_slower"] == 2 and ev["steps_slowest"] == 2
    assert ev["excess"] == pytest_approx(0.30, 0.02)
    assert ev["metric"] == "step time less NCCL kernel time"
    assert len(ev["median_step_ms"]) == 3
    assert "NCCL" in f["hint"] and "throttl" in f["hint"]
    text = run("report", str(out)).stdout
    assert f"straggler (pid {slow['pid']}): rank 2" in text
    md = run("report", str(out), "--format", "markdown").stdout
    assert f"`straggler` (pid {slow['pid']})" in md and "| torch profiler |" in md
    print(f"import of 3 ranks of a100_sampled_rank0: {took:.2f} s")


def pytest_approx(x: float, tol: float):  # type: ignore[no-untyped-def]
    import pytest

    return pytest.approx(x, abs=tol)


@pytest.mark.slow  # in-process, but seconds long: not in make test-fast
def test_v100_ranks_without_nccl_compare_plain_step_time(tmp_path: Path) -> None:
    d = rank_dir(tmp_path, "v100_training_rank0", [1.0, 1.0, 1.3])
    _, rep, took = imported(d, tmp_path)
    (f,) = stragglers(rep)
    assert f["evidence"]["metric"] == "step time" and f["evidence"]["steps_compared"] == 5
    assert "rank 2" in f["title"]
    print(f"import of 3 ranks of v100_training_rank0 (69k events each): {took:.2f} s")


def step(ms: float, comm: float = 0.0) -> Step:
    return Step(ms, comm)


def test_the_rule_wants_most_steps_slower_not_one_outlier() -> None:
    fast = {n: step(100) for n in range(10)}
    spike = {n: step(300 if n == 3 else 101) for n in range(10)}  # one slow step
    assert find_stragglers({1: fast, 2: dict(fast), 3: spike}) == []
    slow = {n: step(100 if n < 4 else 120) for n in range(10)}  # 6 of 10 steps 20 % slower
    (s,) = find_stragglers({1: fast, 2: dict(fast), 3: slow})
    assert s.pid == 3 and s.slow_steps == 6 and s.steps == 10
    th = FindingThresholds(straggler_slower=0.25)
    assert find_stragglers({1: fast, 2: dict(fast), 3: slow}, th) == []


def test_waiting_in_nccl_is_not_work() -> None:
    # every rank's step lasts 100 ms (collectives sync them); the straggler waits least
    waits = {1: 40.0, 2: 40.0, 3: 5.0}
    steps = {pid: {n: step(100, w) for n in range(4)} for pid, w in waits.items()}
    (s,) = find_stragglers(steps)
    assert s.pid == 3 and s.median_ms[3] == 95 and s.median_ms[1] == 60


def test_ranks_without_common_steps_or_alone_are_not_compared() -> None:
    assert find_stragglers({1: {n: step(100) for n in range(5)}}) == []
    a = {n: step(100) for n in range(5)}
    b = {n + 10: step(200) for n in range(5)}
    assert find_stragglers({1: a, 2: b}) == []
