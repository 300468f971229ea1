"""CPU contention as one reading (``CpuWait``, analysis/cpu_contention.py): the session keeps
and folds it, the ``cpu-starved`` finding and the triggers read it, a recording carries it."""

from __future__ import annotations

from infertop.analysis.cpu_contention import CpuContention, ProcessCpu, contention, waited_by_pid
from infertop.analysis.findings import FindingInput, evaluate
from infertop.analysis.session import Session
from infertop.analysis.triggers import Triggers
from infertop.model.events import CpuWait

T0 = 1_700_000_000.0


def _waits(pid: int, seconds: int, share: float, t0: float = T0) -> list[CpuWait]:
    """A process's threads runnable 0.8 s a second, ``share`` of it waiting for a CPU."""
    return [CpuWait(t0 + i, t0 + i + 1, pid, int(0.8e9 * (1 - share)), int(0.8e9 * share)) for i in range(seconds)]


def _starved(c: CpuContention | None) -> list:
    return [f for f in evaluate(FindingInput(cpu=c)) if f.rule == "cpu-starved"]


def test_the_finding_comes_from_a_fifth_of_the_runnable_time_waiting_with_its_bands() -> None:
    assert _starved(None) == []
    assert _starved(contention(_waits(7, 10, 0.1))) == []  # a tenth: a healthy host's noise
    for share, severity in ((0.25, "low"), (0.4, "medium"), (0.6, "high")):
        (f,) = _starved(contention(_waits(7, 10, share)))
        assert f.severity == severity, (share, f)
        assert f"waited for a CPU {share:.0%}" in f.title and "short of CPU" in f.title
        assert f.evidence["waited_share"] == share and f.evidence["processes"] == {"7": share}
        assert "OMP_NUM_THREADS" in f.hint
    # two seconds of runnable time at least: a moment's wait is not a starved host
    assert _starved(contention(_waits(7, 2, 0.6))) == []


def test_several_processes_are_judged_together_and_the_worst_named() -> None:
    c = contention(_waits(7, 10, 0.1) + _waits(8, 10, 0.5))
    assert c is not None and waited_by_pid(c) == {7: 0.1, 8: 0.5}
    (f,) = _starved(c)
    assert "pid 8 most: 50%" in f.title and f.evidence["waited_share"] == 0.3


def test_a_session_keeps_the_readings_and_folds_them_past_its_horizon() -> None:
    s = Session(retain_s=5.0)
    for ev in _waits(7, 30, 0.5) + _waits(8, 30, 0.0):
        s.apply(ev)
    assert s.cpu_waits and s.cpu_waits[0].t_end > T0 + 20  # the old ones folded ...
    c = s.cpu_contention()
    assert c is not None  # ... and still counted
    assert c.of(7) == ProcessCpu(7, 12.0, 12.0) and c.of(8) == ProcessCpu(8, 24.0, 0.0)
    assert s.cpu_contention(pid=8) == CpuContention((ProcessCpu(8, 24.0, 0.0),))
    assert Session().cpu_contention() is None  # nothing read: nothing said


def test_the_triggers_hear_the_same_readings() -> None:
    tr = Triggers(auto=True)
    tr.add(_waits(7, 10, 0.5) + _waits(8, 10, 0.1))
    assert tr.waited(T0, T0 + 10) == 0.3
    assert tr.waited(T0 + 20, T0 + 30) is None
