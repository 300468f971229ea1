"""Replicas without ``ProfilerStep#N`` (the workers of a service) are compared on their forward
calls: the stage spans of each process, median per 5-s interval. A worker whose forward is
consistently slower is a ``straggler`` finding in ``report`` and in the UI's merged view."""

from __future__ import annotations

import json
import random
from pathlib import Path

from infertop.analysis.findings.live import StragglerCheck
from infertop.config import Config
from infertop.model.events import (
    CpuWait,
    Frame,
    FrameDef,
    ProcessDef,
    SampleWindow,
    StackDef,
    StageSpan,
    TargetInfo,
    ThreadDef,
)
from infertop.record.reader import read_recording
from infertop.record.writer import RecordingWriter
from infertop.sources import ReplaySource
from tests.support.cli import run_cli

T0 = 1_700_000_000.0
WORKERS = (101, 102, 103)


def _service(
    path: Path,
    forward_ms: dict[int, float],
    slow_intervals: int | None = None,
    waited: dict[int, float] | None = None,
) -> None:
    """A router and three workers serving for 40 s, 4 forward calls a second each (durations
    around ``forward_ms[pid]``, ±8 %); ``slow_intervals``: only that many 5-s intervals of the
    last worker are slow (an outlier, not a straggler); ``waited``: each worker's share of its
    runnable time spent waiting for a CPU, read as the sampler reads it each second."""
    rng = random.Random(3)
    w = RecordingWriter(str(path))
    w.write([TargetInfo(pid=100, cmdline="python router.py", started=T0),
             ProcessDef(100, 0, "python router.py"), ThreadDef(100, "MainThread", 100),
             FrameDef(0, Frame("forward", "/srv/model.py", 10)), StackDef(0, (0,))]
            + [e for pid in WORKERS for e in (ProcessDef(pid, 100, "python -c spawn_main()"),
                                              ThreadDef(pid, "MainThread", pid))])  # fmt: skip
    for second in range(40):
        t = T0 + second
        spans = []
        for pid in WORKERS:
            base = forward_ms[pid]
            if slow_intervals is not None and pid == WORKERS[-1]:
                base = forward_ms[WORKERS[0]] * (1.4 if second // 5 < slow_intervals else 1.0)
            for k in range(4):
                ms = base * rng.uniform(0.92, 1.08)
                start = t + k * 0.25
                spans.append(StageSpan(pid, "forward", start, start + ms / 1000.0))
        counts = tuple((pid, 0, 10) for pid in WORKERS)
        waits = [CpuWait(t, t + 1, pid, int(0.6e9 * (1 - share)), int(0.6e9 * share))
                 for pid, share in (waited or {}).items()]  # fmt: skip
        w.write(spans + [SampleWindow(t, t + 1, 50.0, 50, counts, 0, 0.0, 4), *waits])
    w.close()


def _report(path: Path) -> dict:
    p = run_cli("report", str(path), "--format", "json")  # in this process
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _stragglers(rep: dict) -> list[dict]:
    return [f for f in rep["findings"] if f["rule"] == "straggler"]


def test_a_worker_with_slower_forward_calls_is_the_straggler(tmp_path: Path) -> None:
    path = tmp_path / "service.infertop"
    _service(path, {101: 40.0, 102: 41.0, 103: 54.0})  # 103 ~33 % slower
    found = _stragglers(_report(path))
    assert len(found) == 1, found
    f = found[0]
    assert f["pid"] == 103 and f["severity"] == "high"
    assert "forward calls take" in f["title"] and "inference 3 (pid 103)" in f["title"]
    ev = f["evidence"]
    assert ev["metric"].startswith("forward call time")
    assert ev["intervals_compared"] == 8 and ev["intervals_slower"] == 8
    assert 50 < ev["median_call_ms"]["inference 3 (pid 103)"] < 58

    # the UI's merged view raises the same finding from the replayed session
    src = ReplaySource(read_recording(str(path)), Config())
    live = StragglerCheck().findings(src.session, src.t)
    assert [x.pid for x in live] == [103]


def test_equal_workers_and_one_slow_spell_are_not_stragglers(tmp_path: Path) -> None:
    equal = tmp_path / "equal.infertop"
    _service(equal, {101: 40.0, 102: 41.0, 103: 40.5})
    assert _stragglers(_report(equal)) == []
    spell = tmp_path / "spell.infertop"
    _service(spell, {101: 40.0, 102: 41.0, 103: 40.0}, slow_intervals=2)  # 2 of 8 intervals
    assert _stragglers(_report(spell)) == []


def test_a_worker_slower_because_it_waited_for_a_cpu_is_the_host_s_doing(tmp_path: Path) -> None:
    """The same 33 % slower worker, whose threads waited for a CPU 45 % of their runnable time
    where its peers waited 5 %: no straggler (the process is not at fault); the worker's own
    findings say the host is short of CPU. Every worker waiting alike, a slower one is the
    straggler still: its own doing, whatever the host's."""
    path = tmp_path / "starved.infertop"
    _service(path, {101: 40.0, 102: 41.0, 103: 54.0}, waited={101: 0.05, 102: 0.05, 103: 0.45})
    rep = _report(path)
    assert _stragglers(rep) == [], rep["findings"]
    mine = next(p for p in rep["processes"] if p["pid"] == 103)
    starved = [f for f in mine["findings"] if f["rule"] == "cpu-starved"]
    assert starved and "waited for a CPU 45%" in starved[0]["title"], mine["findings"]
    src = ReplaySource(read_recording(str(path)), Config())
    assert StragglerCheck().findings(src.session, src.t) == []

    busy = tmp_path / "busy.infertop"
    _service(busy, {101: 40.0, 102: 41.0, 103: 54.0}, waited=dict.fromkeys(WORKERS, 0.3))
    rep = _report(busy)
    assert [f["pid"] for f in _stragglers(rep)] == [103], rep["findings"]
    assert [f["severity"] for f in rep["findings"] if f["rule"] == "cpu-starved"] == ["low"], rep["findings"]
