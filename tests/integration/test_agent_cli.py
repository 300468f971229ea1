"""The in-process agent through the CLI, on samples started plainly (not by infertop)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

import pytest

from .helpers import (
    infertop,
    read_truth,
    report_json,
    start_target,
    stop_target,
    until,
)

pytestmark = pytest.mark.slow


def python_threads(pid: int) -> list[str]:
    from pathlib import Path

    out = subprocess.run(
        [str(Path(sys.executable).parent / "py-spy"), "dump", "--pid", str(pid)],
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    return sorted(line.split('"')[1] for line in out.splitlines() if line.startswith("Thread ") and '"' in line)


def _cpu_s(pid: int) -> float:
    """The process's CPU seconds so far (user + system, every thread), from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rate(truth: str, pid: int, seconds: float) -> float:
    """A sample's requests per CPU second over ``seconds``: the kernel's accounting, so a busy
    machine that gives it less CPU does not read as a slower target; work left in it would."""
    r0, c0 = read_truth(truth)["requests"], _cpu_s(pid)
    time.sleep(seconds)
    r1, c1 = read_truth(truth)["requests"], _cpu_s(pid)
    return (r1 - r0) / max(1e-3, c1 - c0)


def agent_statuses(path: str) -> list[tuple[float, str, str]]:
    """What the agent's collector said over a recording: the first thing to read when ops are missing."""
    from infertop.model.events import CollectorStatus
    from infertop.record.reader import read_recording

    return [
        (round(e.t, 2), e.state, e.message)
        for e in read_recording(path).events
        if isinstance(e, CollectorStatus) and e.collector == "agent"
    ]


def op_times(path: str) -> list[tuple[float, object]]:
    """(seconds, op_time) of each profiler window of a recording that measured op time."""
    from infertop.model.events import OpWindow
    from infertop.record.reader import read_recording

    return [
        (e.t_end - e.t_start, e.op_time)
        for e in read_recording(path).events
        if isinstance(e, OpWindow) and e.op_time is not None
    ]


@pytest.mark.parametrize("sample", ["textgen_service", "copy_heavy", "python_loop"])
def test_injected_agent_brings_torch_ops_and_leaves_nothing(tmp_path, sample: str) -> None:
    """Attached with the agent, each sample gets torch ops by stage, the findings its forward
    plants, and is left as it was: still serving, at its speed (work left in it would slow it
    down by a multiple, not by the machine's few percent: the margin is half), no thread or
    socket of ours, nothing on its stderr. What attaching costs is a benchmark
    (benchmarks/bench_agent_overhead.py, docs/performance.md)."""
    truth = str(tmp_path / "truth.json")
    target = start_target(["-m", f"samples.{sample}", "--truth", truth])
    try:
        until(lambda: read_truth(truth)["requests"] >= 5, 60, f"5 requests in {truth}")
        before_threads = len(os.listdir(f"/proc/{target.pid}/task"))
        before_py = python_threads(target.pid)
        before = rate(truth, target.pid, 4)
        out = str(tmp_path / "a.infertop")
        p = infertop("record", str(target.pid), "-o", out, "--duration", "8",
                     "--inject", "--profile-period", "2", "--profile-window", "0.3")  # fmt: skip
        assert p.returncode == 0, p.stderr
        # requests per CPU second (the kernel's accounting: a busy machine's lesser share of CPU
        # does not read as a slower target), polled: the agent stops within 1 s of detach
        readings = []
        until(lambda: readings.append(rate(truth, target.pid, 4)) or readings[-1] >= before / 2,
              30, f"back to speed: {before:.0f} requests per CPU second before, then {readings}")  # fmt: skip
        assert target.poll() is None
        # no Python thread of ours is left; torch's first profiler use starts one idle native
        # thread of its own (libkineto's ConfigLoader), which lives as long as the process
        assert python_threads(target.pid) == before_py
        assert len(os.listdir(f"/proc/{target.pid}/task")) <= before_threads + 1
        assert not glob.glob(f"/tmp/infertop-*/agent-{target.pid}.sock")
    finally:
        _, err = stop_target(target)
    assert err == "", f"the target's stderr got: {err[:500]}"
    rep = report_json(out)
    aten = [o for o in rep["ops"] if o["name"].startswith("aten::")]
    assert aten, (rep["ops"][:5], agent_statuses(out))
    assert rep["profiler"]["windows"] >= 1
    assert all(o.get("stage") == "forward" for o in aten[:5])
    # each window says what its op thread did by the kernel's count, from the window's start to
    # its stop (a truncated window's span ends earlier: the python loop's 22 ms held 95 ms)
    for span, t in op_times(out):
        assert t.run_us is not None and t.wait_us is not None and t.run_us > 0, (span, t)
    # the findings a user gets on each sample's forward (docs/findings.md)
    rules = {f["rule"] for f in rep["findings"]}
    if sample == "copy_heavy":
        assert "copy-heavy" in rules, rep["findings"]
    elif sample == "python_loop":
        assert rules & {"python-overhead", "tiny-ops"}, rep["findings"]
    else:  # a healthy service: no op rule at more than low (low: its op thread waited for a CPU)
        assert not [f for f in rep["findings"] if f["rule"] in ("copy-heavy", "python-overhead", "tiny-ops")
                    and f["severity"] != "low"], rep["findings"]  # fmt: skip


def test_no_inject_is_py_spy_only_and_says_so(tmp_path) -> None:
    target = start_target(["-m", "samples.python_loop"])
    try:
        out = str(tmp_path / "n.infertop")
        assert infertop("record", str(target.pid), "-o", out, "--duration", "3", "--no-inject").returncode == 0
    finally:
        stop_target(target)
    rep = report_json(out)
    assert rep["ops"] == [] and rep["profiler"]["windows"] == 0
    from infertop.model.events import CollectorStatus
    from infertop.record.reader import read_recording

    agent = [e for e in read_recording(out).events if isinstance(e, CollectorStatus) and e.collector == "agent"]
    assert agent and agent[-1].message == "off (--no-inject)"


def test_target_without_torch_gets_the_agent_and_says_what_it_lacks(tmp_path, repo_root) -> None:
    """No torch: the agent still goes in (stage calls, pauses) and says there are no profiler
    windows, and why; then it leaves."""
    target = start_target([str(repo_root / "tests/integration/targets/annotated.py")])
    try:
        out = str(tmp_path / "t.infertop")
        assert infertop("record", str(target.pid), "-o", out, "--duration", "3", "--inject").returncode == 0
    finally:
        stop_target(target)
    from infertop.model.events import CollectorStatus
    from infertop.record.reader import read_recording

    agent = [e for e in read_recording(out).events if isinstance(e, CollectorStatus) and e.collector == "agent"]
    assert any(e.state == "unavailable" and "torch is not imported" in e.message for e in agent), agent
    assert agent[-1].state == "stopped" and agent[-1].message == "detached"


# solo: two hogs fill one core for the recording's length
@pytest.mark.solo
def test_copies_timed_on_a_starved_core_say_so(tmp_path) -> None:
    """The copy-heavy sample shares one core with two CPU hogs: its op thread is runnable all the
    time and on a CPU a third of it, and its stops land inside whichever op runs, copies as well.
    The finding still comes, low, and says how long the op thread waited for a CPU by the
    kernel's count (the agent's readings of its schedstat in each window)."""
    cpu = min(os.sched_getaffinity(0))

    def on_cpu() -> None:
        os.sched_setaffinity(0, {cpu})

    truth = str(tmp_path / "truth.json")
    target = start_target(["-m", "samples.copy_heavy", "--truth", truth], preexec_fn=on_cpu)
    hogs = []
    try:
        until(lambda: read_truth(truth)["requests"] >= 3, 60, f"3 requests in {truth}")
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=on_cpu)
                for _ in range(2)]  # fmt: skip
        out = str(tmp_path / "starved.infertop")
        p = infertop("record", str(target.pid), "-o", out, "--duration", "6",
                     "--inject", "--profile-period", "1", "--profile-window", "0.3")  # fmt: skip
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        _, err = stop_target(target)
    assert p.returncode == 0, p.stderr
    assert err == "", err[:500]
    windows = op_times(out)
    assert windows, agent_statuses(out)
    waited = sum(t.wait_us for _, t in windows) / sum(t.run_us + t.wait_us for _, t in windows)
    print(f"op thread waited {waited:.0%} in {len(windows)} windows")
    assert waited > 0.5, windows  # a third of a core: two thirds of its runnable time waiting
    copies = [f for f in report_json(out)["findings"] if f["rule"] == "copy-heavy"]
    assert copies, report_json(out)["findings"]
    f = copies[0]
    print(f["severity"], f["title"])
    assert f["severity"] == "low" and "waited for a CPU" in f["title"], f
    assert f["evidence"]["op_thread_waited_for_cpu"] == pytest.approx(waited, abs=0.01), (f, windows)
