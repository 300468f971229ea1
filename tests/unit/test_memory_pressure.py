"""memory-pressure: a memory cgroup close to its limit, and a stage's slow calls that coincide
with the process taking major page faults (the tail view's ``memory`` overlap), told apart from
faults that every call sees. Synthetic readings and recordings through the real summary, tail
and report code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infertop.analysis.findings import RULES, FindingInput
from infertop.analysis.host_memory import summarize_host_memory
from infertop.analysis.tail import IntervalSet, memory_pressure
from infertop.cli import main
from infertop.config import FindingThresholds
from infertop.model.events import StageSpan, TargetInfo
from infertop.model.findings import Finding
from infertop.model.host_memory import CgroupMemory, HostMemoryReading
from infertop.record.writer import RecordingWriter

MIB = 1024**2
GIB = 1024**3
T0 = 1000.0


def readings(
    seconds: int = 60,
    pid: int = 7,
    used: float = 0.5,
    faulting=lambda k: False,
    kills: int = 0,
    limit: int | None = 4 * GIB,
) -> list[HostMemoryReading]:
    """One reading a second; the cgroup uses ``used`` of its limit; 200 major faults a second
    in the seconds where ``faulting(k)`` (the faults counted at the reading that ends them)."""
    out, majors = [], 100
    for k in range(seconds + 1):
        if k and faulting(k - 1):
            majors += 200
        usage = int(used * limit) if limit else 2 * GIB
        cg = CgroupMemory(2, "/kubepods/pod1", limit, usage, kills if k == seconds else 0)
        out.append(HostMemoryReading(T0 + k, pid, 1 * GIB, GIB - 50 * MIB, 40 * MIB, 10 * MIB, 0,
                                     10_000 + k, majors, cg))  # fmt: skip
    return out


def pressure(rs: list[HostMemoryReading], tails=()) -> Finding | None:  # type: ignore[no-untyped-def]
    s = summarize_host_memory(rs)
    procs = s.processes if s is not None else ()
    inp = FindingInput(
        host_memory=procs, host_memory_pids=len(procs) > 1, memory_tails=tuple(tails)
    )
    return RULES["memory-pressure"](inp, FindingThresholds())


@pytest.mark.parametrize(
    "used,severity", [(0.85, None), (0.91, "low"), (0.95, "medium"), (0.98, "high")]
)
def test_the_cgroup_close_to_its_limit(used: float, severity: str | None) -> None:
    f = pressure(readings(used=used))
    if severity is None:
        assert f is None
        return
    assert f is not None and f.severity == severity and f.pid is None
    assert f.evidence["usage_share"] == pytest.approx(used, abs=0.001)
    assert f.evidence["cgroup"] == "/kubepods/pod1" and f.evidence["limit_bytes"] == 4 * GIB
    assert f.title.startswith(
        f"the memory cgroup /kubepods/pod1 is at {100 * used:.0f}% of its 4.00 GiB limit"
    )


def test_oom_kills_make_it_high_and_no_limit_no_finding() -> None:
    f = pressure(readings(used=0.91, kills=2))
    assert f is not None and f.severity == "high" and "2 OOM kills" in f.title
    assert pressure(readings(limit=None)) is None
    assert pressure([]) is None


def test_faulting_intervals_between_readings() -> None:
    rs = readings(faulting=lambda k: k in (20, 21, 40))
    sets = memory_pressure(rs)
    assert set(sets) == {7}
    assert sets[7].total == pytest.approx(3.0)
    assert sets[7].overlap(T0 + 20.5, T0 + 21.5) == pytest.approx(1.0)
    assert sets[7].overlap(T0 + 30, T0 + 39) == 0.0
    # the cgroup's PSI stalls count too: 100 ms stalled in a second of 1 s is 10 %
    stalled = [
        HostMemoryReading(T0 + k, 7, GIB, None, None, None, None, 0, 0,
                          CgroupMemory(2, "/a", None, GIB, 0, 100_000 * k, 0))
        for k in range(3)
    ]  # fmt: skip
    assert memory_pressure(stalled, lambda pid: 0)[0].total == pytest.approx(2.0)
    assert memory_pressure(rs[:1]) == {}


def test_slow_calls_that_coincide_with_faults() -> None:
    rs = readings()
    # a stage's slow calls spent 90 % of their time under faults, its typical calls 5 %
    f = pressure(rs, [("preprocess", 12, 0.9, 0.05)])
    assert f is not None and f.severity == "medium" and f.where == ("stage preprocess",)
    assert (
        "preprocess's 12 slow calls spent 90% of their time while the process took major" in f.title
    )
    assert f.evidence["slow_calls"] == [
        {"stage": "preprocess", "slow_calls": 12, "slow_share": 0.9, "typical_share": 0.05}
    ]
    # faults that every call sees explain none of them; too few slow calls; too little
    assert pressure(rs, [("preprocess", 12, 0.9, 0.8)]) is None
    assert pressure(rs, [("preprocess", 2, 0.9, 0.0)]) is None
    assert pressure(rs, [("preprocess", 12, 0.3, 0.0)]) is None


def calls(fault_windows: list[tuple[float, float]], slow_in_faults: bool = True) -> list[StageSpan]:
    """``preprocess`` calls on thread 70: 10 ms every 100 ms; 300 ms (every 400 ms) inside the
    fault windows, or (``slow_in_faults`` false) in the same length of time elsewhere."""
    slow_at = fault_windows if slow_in_faults else [(a + 15, b + 15) for a, b in fault_windows]
    out, k = [], 0.0
    while k < 59.0:
        slow = any(a <= k < b for a, b in slow_at)
        dur, step = (0.3, 0.4) if slow else (0.01, 0.1)
        out.append(StageSpan(70, "preprocess", T0 + k, T0 + k + dur))
        k += step
    return out


def _report(tmp_path: Path, capsys: pytest.CaptureFixture[str], events: list, name: str) -> dict:  # type: ignore[type-arg]
    path = str(tmp_path / name)
    w = RecordingWriter(path)
    key = lambda e: e.t if isinstance(e, HostMemoryReading) else e.t_end  # noqa: E731
    w.write([TargetInfo(7, "python serve.py", "3.12.1", None, T0), *sorted(events, key=key)])
    w.close()
    capsys.readouterr()
    assert main(["report", path, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_recording_whose_slow_calls_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    windows = [(20.0, 25.0), (40.0, 45.0)]
    faulting = lambda k: any(a <= k < b for a, b in windows)  # noqa: E731
    rep = _report(
        tmp_path, capsys, [*readings(faulting=faulting), *calls(windows)], "fault.infertop"
    )
    (st,) = [s for s in rep["stages"] if s["name"] == "preprocess"]
    assert st["tail"]["overlaps"]["memory"] > 0.9
    (f,) = [f for f in rep["findings"] if f["rule"] == "memory-pressure"]
    assert f["severity"] == "medium" and f["where"] == ["stage preprocess"]
    (row,) = f["evidence"]["slow_calls"]
    assert row["slow_share"] > 0.9 and row["typical_share"] < 0.05
    capsys.readouterr()
    # the text's tail names it among the overlaps
    assert main(["report", str(tmp_path / "fault.infertop")]) == 0
    got = re.search(
        r"overlapped: memory pressure \(major faults, stalls\) (\d+)%", capsys.readouterr().out
    )
    assert got is not None and int(got.group(1)) >= 90
    # the same faults, the slow calls 15 s later: no coincidence, no finding
    rep = _report(
        tmp_path, capsys, [*readings(faulting=faulting), *calls(windows, False)], "apart.infertop"
    )
    (st,) = [s for s in rep["stages"] if s["name"] == "preprocess"]
    assert st["tail"]["overlaps"]["memory"] < 0.05
    assert not [f for f in rep["findings"] if f["rule"] == "memory-pressure"]
    # faults all along: every call sees them
    rep = _report(
        tmp_path, capsys, [*readings(faulting=lambda k: True), *calls(windows)], "all.infertop"
    )
    assert not [f for f in rep["findings"] if f["rule"] == "memory-pressure"]
    # without host memory (a recording made before format 1.8) the overlap is not measured
    rep = _report(tmp_path, capsys, calls(windows), "old.infertop")
    (st,) = [s for s in rep["stages"] if s["name"] == "preprocess"]
    assert st["tail"]["overlaps"]["memory"] is None


def test_interval_set_of_nothing() -> None:
    assert IntervalSet().total == 0.0
