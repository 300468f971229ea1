"""``infertop watch`` on a real target with planted spells of slow calls (targets/spell_loop.py):
the explicit rule and the auto trigger each write exactly one incident that covers its spell,
a quiet target writes none, kill -USR1 writes one now, SIGTERM ends watch cleanly, and
nothing of infertop is left in the target."""

from __future__ import annotations

import glob
import os
import re
import select
import signal
import subprocess
import threading
import time

import pytest

from infertop.analysis.snapshot import build_snapshot
from infertop.config import Config
from infertop.model.events import INCIDENT, Marker, OpWindow, SampleWindow, StageSpan
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource

from .helpers import INFERTOP, ROOT, pid_gone, report_json, start_target, stop_target, until

pytestmark = pytest.mark.slow
SPELL_LOOP = str(ROOT / "tests/integration/targets/spell_loop.py")
LINE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)  (.+)  → (\S+\.infertop)")


def start_spell_loop() -> subprocess.Popen[str]:
    """The target, once it has imported torch (the agent can only be injected from then on):
    one stage, ``forward``, of calls that sleep 50 ms (long enough that a busy machine's late
    wake-ups do not double them); its spells are written to its stdin (``plant``)."""
    args = [SPELL_LOOP, "--forward-ms", "50", "--preprocess-ms", "0"]
    proc = start_target(args, stdin=subprocess.PIPE)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready and proc.stdout.readline().strip() == "ready"
    return proc


class Lines:
    """A process's stderr, read on a thread as it comes (watch's progress lines)."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        self._thread.join(5)
        return "\n".join(self.lines)


def plant(
    target: subprocess.Popen[str], stage: str, start: float, length: float, factor: float
) -> None:
    """``stage`` ``factor`` times slower from unix time ``start`` on, for ``length`` s."""
    assert target.stdin is not None
    target.stdin.write(f"{stage}:{start:.3f}:{length:g}:{factor:g}\n")
    target.stdin.flush()


def armed(stderr: str, *stages: str) -> bool:
    """Whether watch said that the auto trigger watches each of ``stages``."""
    said = [line for line in stderr.splitlines() if line.startswith("auto trigger watching ")]
    watched = {s for line in said for s in line.split("watching ", 1)[1].split(", ")}
    return set(stages) <= watched


def incidents(stdout: str) -> list[tuple[str, str]]:
    """(reason, path) of each incident line on stdout."""
    out = []
    for line in stdout.splitlines():
        m = LINE.fullmatch(line)
        assert m, f"not an incident line: {line!r}"
        out.append((m[2], m[3]))
    return out


def marker_of(path: str) -> Marker:
    rec = read_recording(path)
    assert rec.warning is None
    return next(e for e in rec.events if isinstance(e, Marker) and e.text.startswith(INCIDENT))


def assert_left_nothing(target: subprocess.Popen[str]) -> None:
    """The target runs on; no agent socket, no py-spy of ours on it."""
    assert target.poll() is None
    until(lambda: not glob.glob(f"/tmp/infertop-*/agent-{target.pid}.sock"), 15, "the agent to go")
    ps = subprocess.run(["pgrep", "-f", f"py-spy record --pid {target.pid}"], capture_output=True, text=True)
    assert ps.stdout.strip() == ""


@pytest.mark.long
def test_a_rule_and_the_auto_trigger_each_catch_their_spell(tmp_path) -> None:
    target = start_spell_loop()
    out = tmp_path / "incidents"
    watch = None
    try:
        watch = subprocess.Popen(
            INFERTOP + ["watch", str(target.pid), "--out", str(out), "--duration", "44",
                        "--before", "10", "--after", "5", "--cooldown", "15",
                        "--trigger", "auto", "--trigger", "forward.p95>300ms"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        # 12 s in, forward 12x slower (600 ms: the rule's; the auto trigger has no 20 s of
        # calls yet); 34 s in, 4x slower (200 ms: under the rule, the auto trigger's)
        began = time.time()
        spells = [(began + 12, 12.0), (began + 34, 4.0)]
        for start, factor in spells:
            plant(target, "forward", start, 4, factor)
        stdout, stderr = watch.communicate(timeout=120)
        assert watch.returncode == 0, stderr
        assert_left_nothing(target)
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
            watch.communicate()
        stop_target(target)
    found = incidents(stdout)
    assert len(found) == 2, (stdout, stderr)  # nothing before, between or after
    assert sorted(os.listdir(out)) == sorted(os.path.basename(p) for _, p in found)
    (rule_reason, _), (auto_reason, _) = found
    # where the target's threads waited for a CPU, the firing says so (seen beside two CPU hogs)
    short = (r"; its threads waited for a CPU \d+% of their runnable time \(\d+% before\): "
             r"the machine (is|was as) short of CPU( the minute before)?")
    assert re.fullmatch(rf"forward\.p95 \d+ ms > 300 ms({short})?", rule_reason), rule_reason
    assert auto_reason.startswith("forward."), auto_reason  # its p95 (or its rate, halved)
    assert armed(stderr, "forward")
    for (reason, path), (start, factor), trigger in zip(found, spells, ("forward.p95>300ms", "auto")):
        marker = marker_of(path)
        assert marker.text == INCIDENT + reason and marker.extra["trigger"] == trigger
        # found within 3 s of the spell's start (about one: the agent sends calls twice a second)
        assert start < marker.t < start + 3, (trigger, marker.t - start)
        print(f"{trigger}: found {marker.t - start:.2f} s into its spell; {os.path.getsize(path)} bytes")
        rec = read_recording(path)
        spans = [e for e in rec.events if isinstance(e, StageSpan)]
        assert min(s.t_start for s in spans) < start - 5  # the seconds before the spell...
        assert max(s.t_end for s in spans) > start + 4  # ...the whole spell, and after it
        assert min(s.t_start for s in spans) > marker.t - 10.5  # --before, not more
        slow = [s for s in spans if s.t_end - s.t_start > 0.05 * factor * 0.8]
        inside = [s for s in slow if start - 0.1 < s.t_end < start + 4 + 0.05 * factor + 0.1]
        assert len(inside) >= 0.7 * 4 / (0.05 * factor)
        assert len(inside) >= 0.9 * len(slow), [  # (a busy machine oversleeps a call now and then)
            (round(s.t_start - start, 2), round(1000 * (s.t_end - s.t_start))) for s in slow
        ]  # fmt: skip
        # a normal recording: report and replay read it whole
        rep = report_json(path)
        calls = {s["name"]: s["calls"] for s in rep["stages"]}
        assert calls["forward"] == len(spans) > 100
        assert 12 < rep["duration_s"] < 18
        replay = ReplaySource(rec, Config())
        # py-spy's samples before the spell and in it (its windows are 1 s each on a quiet
        # host and longer on a busy one: their count is not judged)
        windows = [e for e in rec.events if isinstance(e, SampleWindow)]
        assert any(w.t_start < start for w in windows) and any(w.t_end > start for w in windows)
        assert build_snapshot(replay.session, t=replay.t).windows > 0
        assert any(isinstance(e, OpWindow) for e in rec.events)  # the profiler's windows


@pytest.mark.long
def test_a_quiet_target_writes_nothing_until_sigusr1_and_sigterm_ends_watch(tmp_path) -> None:
    target = start_spell_loop()  # no spell
    out = tmp_path / "incidents"
    watch = subprocess.Popen(
        INFERTOP + ["watch", str(target.pid), "--out", str(out), "--before", "10", "--after", "3",
                    "--duration", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    err = Lines(watch.stderr)
    try:
        until(lambda: armed("\n".join(err.lines), "forward"), 60, "auto to arm")
        since = time.monotonic()
        # quiet: 12 s of the auto trigger watching a steady load, and no incident
        until(lambda: time.monotonic() > since + 12 or os.listdir(out), 20, "12 quiet seconds")
        assert os.listdir(out) == []
        watch.send_signal(signal.SIGUSR1)
        asked = time.time()
        done = until(lambda: [f for f in os.listdir(out) if f.endswith(".infertop")], 20, "an incident")
        assert not pid_gone(watch.pid)  # it keeps watching
        watch.send_signal(signal.SIGTERM)
        watch.wait(timeout=30)  # (its stderr is read by `err`; stdout holds a line or two)
        stdout = watch.stdout.read() if watch.stdout else ""
        assert watch.returncode == 0, err.text()
        assert_left_nothing(target)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
        stop_target(target)
    (reason, path), = incidents(stdout)
    assert reason == "manual capture (SIGUSR1)" and os.path.basename(path) == done[0]
    marker = marker_of(path)
    assert asked - 0.5 < marker.t < asked + 1.0
    rec = read_recording(path)
    spans = [e for e in rec.events if isinstance(e, StageSpan)]
    assert min(s.t_start for s in spans) < marker.t - 9 and max(s.t_end for s in spans) > marker.t + 2
    assert report_json(path)["stages"]
    assert "(SIGTERM)" in err.text().splitlines()[-1]
