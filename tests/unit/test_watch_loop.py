"""watch's loop on a stand-in collector (no processes): SIGUSR1 writes an incident, one line on
stdout names it, SIGTERM stops, --max-incidents stops, the agent and NVML are asked for more."""

from __future__ import annotations

import io
import os
import re
import signal
import threading
import time

from support.standin import Live

from infertop.config import Config
from infertop.model.events import (
    Marker,
    SampleWindow,
    TargetExited,
    TargetInfo,
)
from infertop.record.incident import incident_path
from infertop.record.reader import read_recording
from infertop.watch.loop import Watch, WatchOptions


def watch(tmp_path, **kw) -> tuple[Watch, Live, io.StringIO, io.StringIO]:
    live = Live()
    out, err = io.StringIO(), io.StringIO()
    opts = WatchOptions(out_dir=str(tmp_path), **kw)
    w = Watch(TargetInfo(os.getpid(), "python serve.py"), Config(), opts, [live], out=out, err=err)
    return w, live, out, err


def later(seconds: float, sig: int) -> threading.Timer:
    timer = threading.Timer(seconds, os.kill, (os.getpid(), sig))
    timer.start()
    return timer


def test_sigusr1_writes_an_incident_and_sigterm_stops(tmp_path) -> None:
    w, live, out, err = watch(tmp_path, before=5.0, after=0.5, duration=20.0)
    timers = [later(1.0, signal.SIGUSR1), later(2.5, signal.SIGTERM)]
    usr1 = signal.getsignal(signal.SIGUSR1)
    t = time.monotonic()
    try:
        assert w.run() == 0
    finally:
        for timer in timers:
            timer.cancel()
    assert time.monotonic() - t < 5
    assert signal.getsignal(signal.SIGUSR1) == usr1  # given back
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    m = re.fullmatch(r"(\S+Z)  manual capture \(SIGUSR1\)  → (\S+)", lines[0])
    assert m, lines
    path = m[2]
    assert os.path.dirname(path) == str(tmp_path)
    assert re.fullmatch(r"incident-\d{8}T\d{6}Z\.infertop", os.path.basename(path))
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]  # no .part left
    rec = read_recording(path)
    assert rec.warning is None
    marker = next(e for e in rec.events if isinstance(e, Marker) and e.text.startswith("incident"))
    assert marker.text == "incident: manual capture (SIGUSR1)"
    assert marker.extra["trigger"] == "manual"
    windows = [e for e in rec.events if isinstance(e, SampleWindow)]
    assert windows and min(x.t_start for x in windows) < marker.t - 0.5  # the seconds before
    assert max(x.t_end for x in windows) >= marker.t + 0.5  # and the after
    assert live.asked == ["profile_now", "sample_faster 0.1 0.5"]
    assert "(SIGTERM)" in err.getvalue().splitlines()[-1]
    assert "1 incident in" in err.getvalue()


def test_max_incidents_stops_watch(tmp_path) -> None:
    w, _, out, err = watch(tmp_path, before=1.0, after=0.25, max_incidents=1, duration=20.0)
    w.manual = True  # as if SIGUSR1 came at once
    assert w.run() == 0
    assert len(out.getvalue().splitlines()) == 1
    assert "(--max-incidents 1 reached)" in err.getvalue()


def test_an_incident_open_when_watch_stops_is_closed_with_what_it_has(tmp_path) -> None:
    w, _, out, err = watch(tmp_path, before=1.0, after=60.0, duration=1.0)
    w.manual = True
    assert w.run() == 0
    line = out.getvalue().strip()
    assert line.endswith("(cut short: duration reached)"), line
    path = line.split("  → ")[1].split(" (")[0]
    assert read_recording(path).warning is None and not os.path.exists(path + ".part")


def test_incident_names_never_overwrite(tmp_path) -> None:
    t = 1_796_193_943.3
    first = incident_path(str(tmp_path), t)
    assert first.endswith("incident-20261202T064543Z.infertop")
    open(first, "w").close()
    second = incident_path(str(tmp_path), t)
    assert second.endswith("incident-20261202T064543Z-2.infertop")
    open(second + ".part", "w").close()
    assert incident_path(str(tmp_path), t).endswith("-3.infertop")


def test_the_target_exiting_ends_watch_and_closes_the_incident_with_the_exit(tmp_path) -> None:
    w, live, out, err = watch(tmp_path, before=1.0, after=30.0, duration=20.0)
    poll = live.poll
    ends = time.time() + 1.0

    def dying() -> list[object]:
        if time.time() < ends:
            return poll()
        return [TargetExited(time.time(), "the target process exited")]

    live.poll = dying  # type: ignore[method-assign]
    w.manual = True
    assert w.run() == 0
    assert "(the target exited)" in err.getvalue().splitlines()[-1]
    line = out.getvalue().strip()
    assert line.endswith("(cut short: the target exited)"), line
    rec = read_recording(line.split("  → ")[1].split(" (")[0])
    assert isinstance(rec.events[-1], TargetExited)
