"""Real py-spy against real processes: rules, annotations, recordings that survive SIGKILL."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from infertop.analysis.snapshot import build_snapshot
from infertop.collect.thread_cpu import run_and_wait_ns
from infertop.collect.target import inspect_target
from infertop.config import Config
from infertop.model.events import SampleWindow
from infertop.record.reader import read_recording
from infertop.sources import LiveSource, ReplaySource

from .helpers import INFERTOP, ROOT, infertop, report_json, shares, start_target, stop_target, until

pytestmark = pytest.mark.slow
ANNOTATED = str(ROOT / "tests/integration/targets/annotated.py")


def test_custom_rules_and_annotations_are_honoured(tmp_path) -> None:
    target = start_target([ANNOTATED])
    try:
        out = str(tmp_path / "a.infertop")
        # py-spy's classification only (--no-inject: the agent, which would go into this
        # torch-less target for its ingest spans, is not what this test is about)
        p = infertop("record", str(target.pid), "-o", out, "--duration", "4", "--rate", "100",
                    "--stage", "tensorize=*annotated.py:crunch", "--no-inject")  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert "wrote" in p.stderr
    finally:
        stop_target(target)
    rep = report_json(out)
    s = shares(rep)
    # each function is a third of the work: the rule claims crunch, the decorator claims ingest.
    # 400 samples at most: a third's sampling error is ~0.024, the tolerance ~4 sigma; a busy
    # machine gives fewer samples (py-spy's ticks come late), and the tolerance widens with them
    n = rep["sampling"]["samples"]
    assert n >= 50, rep["sampling"]
    tol = max(0.1, 4 * math.sqrt(2 / 9 / n))
    assert s["tensorize"] == pytest.approx(1 / 3, abs=tol), (s, n)
    assert s["ingest"] == pytest.approx(1 / 3, abs=tol), (s, n)
    assert s["other"] == pytest.approx(1 / 3, abs=tol), (s, n)
    # stage rules apply at read time: the same recording re-read with a rule for churn
    s2 = shares(report_json(out, "--stage", "wrangle=churn", "--stage", "tensorize=crunch"))
    assert s2["wrangle"] == pytest.approx(1 / 3, abs=tol), s2
    assert s2.get("other", 0.0) < 0.1, s2


def _on_cpu(cpu: int) -> Callable[[], None]:
    return lambda: os.sched_setaffinity(0, {cpu})


# solo: two hogs fill one core for the recording's length
@pytest.mark.solo
def test_a_target_starved_of_cpu_keeps_its_wall_shares(tmp_path) -> None:
    """The annotated target shares one core with two CPU hogs: its thread is runnable all the
    time and on a CPU a third of it. Waiting for a CPU is not idle time: each function is still
    a third of the wall view (CPU windows once counted only the time on a CPU as active, and the
    wall view moved the rest of ``other`` to ``idle``: other 0.19, the others 0.40)."""
    cpu = min(os.sched_getaffinity(0))
    target = start_target([ANNOTATED], preexec_fn=_on_cpu(cpu))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_on_cpu(cpu))
            for _ in range(2)]  # fmt: skip
    try:
        before = run_and_wait_ns([target.pid])
        out = str(tmp_path / "starved.infertop")
        p = infertop("record", str(target.pid), "-o", out, "--duration", "8", "--rate", "100",
                     "--stage", "tensorize=*annotated.py:crunch", "--no-inject")  # fmt: skip
        on, waited = (b - a for a, b in zip(before, run_and_wait_ns([target.pid])))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        stop_target(target)
    assert p.returncode == 0, p.stderr
    # starved indeed: the kernel's accounting, so that the test cannot pass on an idle core
    assert waited > on, f"target ran {on / 1e9:.2f} s and waited {waited / 1e9:.2f} s for a CPU"
    rep = report_json(out)
    s, n = shares(rep), rep["sampling"]["samples"]
    tol = max(0.1, 4 * math.sqrt(2 / 9 / n))
    for stage in ("tensorize", "ingest", "other"):
        assert s[stage] == pytest.approx(1 / 3, abs=tol), (stage, s, n)
    # the bias itself, sharper than a share's tolerance: other read half the others (0.48)
    assert s["other"] > 0.7 * (s["tensorize"] + s["ingest"]) / 2, (s, n)
    # and the report says why: the host is short of CPU, by the kernel's count (two thirds of
    # the target's runnable time waiting: high from a half)
    starved = [f for f in rep["findings"] if f["rule"] == "cpu-starved"]
    assert [f["severity"] for f in starved] == ["high"], rep["findings"]


def test_replay_shows_what_live_showed(tmp_path) -> None:
    target = start_target([ANNOTATED])
    out = str(tmp_path / "live.infertop")
    try:
        src = LiveSource(inspect_target(target.pid), Config(), record_path=out)
        src.start()
        time.sleep(3.3)
        src.pump()
        src.stop()
    finally:
        stop_target(target)
    live = build_snapshot(src.session)
    replay = ReplaySource(read_recording(out), Config())
    again = build_snapshot(replay.session, t=replay.t)
    # ~3 windows of 50 Hz (the default): fewer on a busy machine, where py-spy's own ticks
    # come late; what matters is that replay has every one of them
    assert live.samples > 20
    assert again.totals == live.totals
    assert again.top == live.top
    assert again.flame.total == live.flame.total
    assert [n.frame for n in again.flame.sorted_children()] == [n.frame for n in live.flame.sorted_children()]


def _windows_on_disk(path: str) -> int:
    try:
        return sum(isinstance(e, SampleWindow) for e in read_recording(path).events)
    except Exception:  # noqa: BLE001 - not there yet, or no header yet
        return 0


def test_sigkill_during_record_leaves_a_readable_recording(tmp_path) -> None:
    target = start_target([ANNOTATED])
    out = str(tmp_path / "killed.infertop")
    tmp = tmp_path / "tmp"  # infertop's temporary folders, this test's alone
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    rec = subprocess.Popen(INFERTOP + ["record", str(target.pid), "-o", out],
                           stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        # killed once three windows are on disk (a busy machine's py-spy is slow to give them)
        until(lambda: _windows_on_disk(out) >= 3, 60, "three windows in the recording")
        rec.send_signal(signal.SIGKILL)
        rec.wait()

        def no_pyspy() -> bool:  # py-spy gets SIGINT from the kernel when its parent dies
            ps = subprocess.run(["pgrep", "-f", f"py-spy record --pid {target.pid}"], capture_output=True, text=True)
            return ps.stdout.strip() == ""

        until(no_pyspy, 30, "no py-spy of ours left on the target")
        assert target.poll() is None, "the target must survive"
        state = open(f"/proc/{target.pid}/stat").read().rsplit(")", 1)[1].split()[0]
        assert state in ("R", "S"), f"target left in state {state}"
        # a killed infertop removes nothing: its py-spy folder stays, until the next infertop
        # (a minute on: a folder written to lately may be a live one's) sweeps it away
        (left,) = tmp.glob(f"infertop-pyspy-{rec.pid}-*")
        os.utime(left, (time.time() - 120, time.time() - 120))
        again = ["record", str(target.pid), "-o", str(tmp_path / "next.infertop"), "--duration", "1",
                 "--no-inject"]  # fmt: skip
        nxt = subprocess.run(INFERTOP + again, capture_output=True, text=True, timeout=60, env=env)
        assert nxt.returncode == 0, nxt.stderr
        assert sorted(p.name for p in tmp.iterdir()) == [], "left in the temporary folder"
    finally:
        stop_target(target)
    rep = report_json(out)
    # ~3 one-second windows made it to disk (CPU and wall windows alternate)
    # (a busy machine's py-spy gives fewer samples a window: 33 in three on a loaded run)
    assert rep["sampling"]["windows"] >= 3 and rep["sampling"]["samples"] >= 15, rep["sampling"]
    assert rep["duration_s"] >= 2.5


def test_sigint_stops_record_even_when_started_with_sigint_ignored(tmp_path) -> None:
    """A script's background job (`infertop record ... &`) starts with SIGINT ignored, which
    Python keeps: `kill -INT` (Ctrl-C's signal) still stops the recording and writes it."""
    target = start_target([ANNOTATED])
    out = str(tmp_path / "bg.infertop")
    rec = subprocess.Popen(
        INFERTOP + ["record", str(target.pid), "-o", out, "--duration", "60", "--no-inject"],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    try:
        time.sleep(3.0)
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=20)
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.communicate()
        stop_target(target)
    assert rec.returncode == 0 and "(interrupted)" in err, err
    assert report_json(out)["sampling"]["samples"] > 0


def test_target_exit_mid_session_closes_the_recording(tmp_path) -> None:
    # lives 6 s: py-spy's attach and first windows took seconds of that on a busy machine
    target = start_target([ANNOTATED, "6"])
    out = str(tmp_path / "exit.infertop")
    p = infertop("record", str(target.pid), "-o", out, "--duration", "30")
    stop_target(target)
    assert p.returncode == 0
    assert "target exited" in p.stderr
    rep = report_json(out)
    assert rep["target_exited"] is True
    # ~6 s at 50 Hz (300); far fewer when the machine is busy (a loaded run got 20 of 3 s)
    assert rep["sampling"]["samples"] > 20, rep["sampling"]
    assert read_recording(out).warning is None


def test_record_leaves_the_target_clean(tmp_path) -> None:
    target = start_target([ANNOTATED])
    try:
        before = sorted(p.name for p in (__import__("pathlib").Path(f"/proc/{target.pid}/task")).iterdir())
        p = infertop("record", str(target.pid), "-o", str(tmp_path / "c.infertop"), "--duration", "2")
        assert p.returncode == 0
        after = sorted(p.name for p in (__import__("pathlib").Path(f"/proc/{target.pid}/task")).iterdir())
        assert before == after
    finally:
        out, err = stop_target(target)
    assert err == ""  # nothing of ours in the target's stderr
    assert out.strip().splitlines() == ["ready"]
