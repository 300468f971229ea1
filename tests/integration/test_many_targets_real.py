"""Several processes with the agent: every torch worker of a ``--children`` tree gets it (its
op windows carry its pid), and several PIDs on one command line are one session in which a
target that exits is a marker, not the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from infertop.analysis.findings.rules import COPYING_OPS
from infertop.model.events import (
    CollectorStatus,
    Marker,
    OpWindow,
    ProcessDef,
    SampleWindow,
    ThreadDef,
)
from infertop.record.reader import read_recording

from .helpers import (
    INFERTOP,
    ROOT,
    report_json,
    serving,
    start_target,
    stop_target,
    until,
    workers_of,
)

pytestmark = pytest.mark.slow


def _record(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        INFERTOP + ["record", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _recorded(path: str) -> list:
    """The events of a recording being written (up to its last complete record)."""
    try:
        return read_recording(path).events
    except Exception:  # noqa: BLE001 - not there yet
        return []


def _until(condition, timeout: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return False


def _no_agents_left(pids: list[int]) -> bool:
    """No agent thread is left in any of ``pids`` (py-spy dump lists every thread)."""
    py_spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    for pid in pids:
        out = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True)
        if "infertop-agent" in out.stdout:
            return False
    return True


def test_every_torch_worker_gets_the_agent(tmp_path) -> None:
    sample = serving(["samples/multiproc_service.py", "--workers", "2"])
    out = str(tmp_path / "agents.infertop")
    try:
        workers = workers_of(sample.pid)
        assert len(workers) == 2
        rec = _record(str(sample.pid), "--children", "-o", out, "--duration", "120",
                      "--profile-period", "3")  # fmt: skip
        # until each worker's agent has sent a window (a loaded machine takes longer), then
        # one period more, then Ctrl-C
        _until(lambda: {e.pid for e in _recorded(out) if isinstance(e, OpWindow)} >= set(workers),
               90)  # fmt: skip
        time.sleep(3)
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=90)
        assert rec.returncode == 0, err
        assert sample.poll() is None  # the service carries on
        # detached from every process: no agent thread left behind in any worker (each leaves
        # within a moment of detach: polled, as a busy machine delays it)
        until(lambda: _no_agents_left(workers), 30, f"the agents to leave workers {workers}", 0.5)
    finally:
        sample.send_signal(signal.SIGTERM)
        _, serve_err = sample.communicate(timeout=30)
    assert "Traceback" not in serve_err and "infertop" not in serve_err  # nothing in its logs

    events = read_recording(out).events
    by_pid: dict[int, list[OpWindow]] = {}
    for w in events:
        if isinstance(w, OpWindow):
            by_pid.setdefault(w.pid, []).append(w)
    for pid in workers:  # each worker's own agent: its model's ops, under its pid
        ops = {name for w in by_pid.get(pid, []) for p in w.paths for name in p.names}
        assert "aten::linear" in ops or "aten::addmm" in ops, (
            pid, sorted(by_pid), [e for e in events if isinstance(e, CollectorStatus)])
    statuses = [e for e in events if isinstance(e, CollectorStatus) and e.collector == "agents"]
    assert any(s.state == "running" and s.message.startswith("2 of 2") for s in statuses), statuses

    rep = report_json(out)
    assert {p["pid"] for p in rep["processes"]} >= set(workers)
    assert any(o["name"] in ("aten::linear", "aten::addmm") for o in rep["ops"]), rep["ops"][:5]


def _forward(e: object, pid: int) -> bool:
    """``e`` is an op window of ``pid`` with ops of the forward stage in it."""
    return isinstance(e, OpWindow) and e.pid == pid and any(p.stage == "forward" for p in e.paths)


def _copy_share(w: OpWindow) -> str:
    """A window's copies over its CPU op time, as copy-heavy counts them."""
    cpu = [p for p in w.paths if p.device == "cpu"]
    copies = sum(p.self_us for p in cpu if p.names[-1] in COPYING_OPS)
    return f"copies {copies:.0f} of {sum(p.self_us for p in cpu):.0f} us"


def test_several_pids_are_one_session_and_one_may_exit(tmp_path) -> None:
    first = start_target([str(ROOT / "samples/python_loop.py")])
    second = start_target([str(ROOT / "samples/copy_heavy.py")])
    out = str(tmp_path / "two.infertop")
    try:
        time.sleep(2)  # torch imported in both
        rec = _record(str(first.pid), str(second.pid), "-o", out, "--duration", "120",
                      "--profile-period", "2")  # fmt: skip
        # the second target's agent has sent a window of its model at work (injection and the
        # first window take a few seconds, more on a loaded machine; on a starved one a window
        # may hold only a request's JSON, nothing for copy-heavy to judge): then it exits
        assert _until(lambda: any(_forward(e, second.pid) for e in _recorded(out)), 60), (
            "no window of forward ops from the second")
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=15)
        time.sleep(4)
        assert rec.poll() is None  # the other target keeps the session going
        rec.send_signal(signal.SIGINT)  # as Ctrl-C
        _, err = rec.communicate(timeout=60)
        assert rec.returncode == 0, err
        assert "(interrupted)" in err
        assert first.poll() is None
    finally:
        stop_target(first)
        stop_target(second)

    events = read_recording(out).events
    procs = {e.pid: e for e in events if isinstance(e, ProcessDef)}
    assert set(procs) == {first.pid, second.pid}
    assert procs[first.pid].ppid == 0 and procs[second.pid].ppid == 0  # both targets
    owner = {e.tid: e.pid for e in events if isinstance(e, ThreadDef)}
    gone = [m for m in events if isinstance(m, Marker) and m.extra.get("pid") == str(second.pid)]
    assert len(gone) == 1 and "exited" in gone[0].text
    samples = {first.pid: [0, 0], second.pid: [0, 0]}  # before, after the exit
    for w in events:
        if isinstance(w, SampleWindow):
            for tid, _sid, n in w.counts:
                samples[owner[tid]][w.t_start > gone[0].t] += n
    assert samples[first.pid][0] > 0 and samples[first.pid][1] > 0
    assert samples[second.pid][0] > 0 and samples[second.pid][1] == 0
    ops = {w.pid for w in events if isinstance(w, OpWindow)}
    assert {0, second.pid} <= ops  # the first target's agent, and the second's

    rep = report_json(out)
    roles = {p["pid"]: p for p in rep["processes"]}
    assert roles[second.pid]["exited_after_s"] is not None
    assert roles[first.pid]["exited_after_s"] is None
    # two targets: neither is a router; the Python-loop model is named for what it does
    assert roles[first.pid]["role"].startswith("inference"), roles[first.pid]["role"]
    # the rules on each process alone: the copies are the copy-heavy sample's, and say so
    copies = [f for f in roles[second.pid]["findings"] if f["rule"] == "copy-heavy"]
    # (once missing in a fresh-clone run beside two CPU hogs: the process's findings, samples
    # before its exit, and its op windows are in the message)
    windows = [(round(w.t_end - w.t_start, 3), w.op_time, _copy_share(w)) for w in events
               if isinstance(w, OpWindow) and w.pid == second.pid]  # fmt: skip
    evidence = f"{roles[second.pid]['findings']}, samples {samples[second.pid]}, windows {windows}"
    assert copies and copies[0]["pid"] == second.pid, evidence
