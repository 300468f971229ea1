"""watch's ring and incident files: old events go, definitions stay, and an incident is a
complete recording of the seconds before and after its trigger."""

from __future__ import annotations

import os

from infertop.analysis.snapshot import build_snapshot
from infertop.collect.pyspy import RawSampleWindow
from infertop.config import Config
from infertop.model.events import (
    INCIDENT,
    CollectorStatus,
    Frame,
    FrameDef,
    Marker,
    SampleWindow,
    StackDef,
    StageSpan,
    TargetInfo,
    ThreadDef,
)
from infertop.record.clock import STARTED
from infertop.record.incident import EventRing, Incident, event_time, incident_marker
from infertop.record.reader import read_recording
from infertop.report.recording import recording_report
from infertop.report.text import render_markdown, render_text
from infertop.sources import LiveSource, ReplaySource

T0 = 1_700_000_000.0
TARGET = TargetInfo(4242, "python serve.py", "3.11.7", None, T0)


class Scripted:
    """A collector whose ``poll`` hands out what the test queued (no threads)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.queued: list[object] = []

    def start(self) -> None:
        pass

    def poll(self) -> list[object]:
        out, self.queued = self.queued, []
        return out

    def stop(self) -> None:
        pass


def second(i: int) -> list[object]:
    """Second ``i`` of a session: a py-spy window whose stack is new every second (so new
    frames and stacks are defined all along) and ten forward calls."""
    t = T0 + i
    stack = (Frame("<module>", "/srv/serve.py", 1), Frame(f"step_{i}", "/srv/model.py", 10 + i))
    raw = RawSampleWindow(t, t + 1.0, 100.0, 100, ((101, "MainThread", stack, 60),), threads=1)
    spans = [StageSpan(101, "forward", t + k / 10, t + k / 10 + 0.02) for k in range(10)]
    return [raw, *spans]


def live(tmp_path, seconds: int, ring: EventRing) -> tuple[LiveSource, Scripted]:
    py = Scripted("py-spy")
    src = LiveSource(TARGET, Config(), collectors=[py])
    ring.add(src.definitions(), now=T0)  # the NVML probe's status has today's time
    src.listeners.append(ring.add)
    for i in range(seconds):
        py.queued = second(i)
        src.pump()
    return src, py


def test_old_events_go_and_definitions_stay(tmp_path) -> None:
    ring = EventRing(keep_s=5.0)
    src, _ = live(tmp_path, 30, ring)
    kept = ring.since(float("-inf"))
    times = [event_time(e) for e in kept]
    # the newest event ends at T0 + 30; a batch goes as a whole (its window first, then its
    # spans, a second older)
    assert T0 + 24 < min(times) < T0 + 25
    assert ring.oldest == T0 + 25
    assert {type(e) for e in kept} >= {SampleWindow, StageSpan}
    defs = ring.definitions()
    frames = [e.frame_id for e in defs if isinstance(e, FrameDef)]
    stacks = [e.stack_id for e in defs if isinstance(e, StackDef)]
    assert frames == list(range(len(src.session.symbols.frames))) and len(frames) == 31
    assert stacks == list(range(30))
    assert any(isinstance(e, ThreadDef) for e in defs)
    assert defs[0] == TARGET
    assert any(isinstance(e, CollectorStatus) for e in defs)  # the NVML probe's, at least


def test_count_and_size_bounds_drop_the_oldest_and_say_so() -> None:
    ring = EventRing(keep_s=1e9, max_events=50)
    ring.add([StageSpan(1, "forward", T0 + i, T0 + i + 0.01) for i in range(80)])
    assert len(ring) == 50 and ring.dropped == 30
    assert ring.oldest == T0 + 30.01
    small = EventRing(keep_s=1e9, max_bytes=1000)
    small.add([StageSpan(1, "forward", T0 + i, T0 + i + 0.01) for i in range(80)])
    assert small.bytes <= 1000 and small.dropped == 80 - len(small)


def test_an_incident_is_a_complete_recording_of_before_and_after(tmp_path) -> None:
    ring = EventRing(keep_s=30.0)
    src, py = live(tmp_path, 50, ring)  # up to T0 + 50
    path = str(tmp_path / "incident-x.infertop")
    marker = incident_marker(T0 + 50, "auto", "forward.p95 80 ms > 2× 60 s p95 (20 ms)", 10, 5)
    inc = Incident(path, ring, marker, before=10.0, after=5.0)
    src.listeners.append(inc.write)
    assert os.path.exists(path + ".part") and not os.path.exists(path)
    i = 50
    while not inc.due(T0 + i):
        py.queued = second(i)
        src.pump()
        i += 1
    assert i == 55
    assert inc.close() == path and not os.path.exists(path + ".part")

    rec = read_recording(path)
    assert rec.warning is None
    ev = rec.events
    assert ev[0] == TARGET
    starts = [e for e in ev if isinstance(e, Marker) and e.text == STARTED]
    assert len(starts) == 1 and starts[0].t == T0 + 40 and "host" in starts[0].extra
    incidents = [e for e in ev if isinstance(e, Marker) and e.text.startswith(INCIDENT)]
    assert [m.text for m in incidents] == ["incident: forward.p95 80 ms > 2× 60 s p95 (20 ms)"]
    assert incidents[0].extra == {"trigger": "auto", "before_s": "10", "after_s": "5"}
    windows = [e for e in ev if isinstance(e, SampleWindow)]
    spans = [e for e in ev if isinstance(e, StageSpan)]
    # the before range (T0 + 40 on) and the after range (to T0 + 55)
    assert min(w.t_end for w in windows) == T0 + 40 and max(w.t_end for w in windows) == T0 + 55
    assert min(s.t_end for s in spans) >= T0 + 40 and max(s.t_end for s in spans) > T0 + 54.9
    # every frame ever defined is there, also those of windows long gone (a later incident
    # needs them as much as this one)
    assert len([e for e in ev if isinstance(e, FrameDef)]) == 56

    replay = ReplaySource(rec, Config())
    snap = build_snapshot(replay.session, t=replay.t)
    assert snap.samples == 16 * 60  # the windows ending at T0 + 40 ... T0 + 55
    assert replay.t0 == T0 + 39
    rep = recording_report(rec, Config(), path=path).report
    forward = next(s for s in rep["stages"] if s["name"] == "forward")
    assert forward["calls"] == len(spans) == 150
    assert rep["incidents"] == [{"t": T0 + 50, "at_s": 11.0, "trigger": "auto",
                                 "reason": "forward.p95 80 ms > 2× 60 s p95 (20 ms)"}]  # fmt: skip
    text = render_text(rep)
    assert "\nincident at 11.0 s (auto): forward.p95 80 ms > 2× 60 s p95 (20 ms)\n" in text
    assert "- **incident** at 11.0 s (auto): forward.p95" in render_markdown(rep)


def test_the_ring_serves_incident_after_incident(tmp_path) -> None:
    """Two incidents from one ring: the second still starts with every definition."""
    ring = EventRing(keep_s=8.0)
    src, py = live(tmp_path, 20, ring)
    for n, end in enumerate((20, 40)):
        while src.session.t_last < T0 + end:
            py.queued = second(int(src.session.t_last - T0))
            src.pump()
        path = str(tmp_path / f"i{n}.infertop")
        inc = Incident(path, ring, incident_marker(T0 + end, "manual", "manual capture", 5, 0), 5, 0)
        inc.close()
        rec = read_recording(path)
        assert rec.warning is None
        windows = [e for e in rec.events if isinstance(e, SampleWindow)]
        assert [w.t_end for w in windows] == [T0 + end - 5 + k for k in range(6)]
        ReplaySource(rec, Config())  # every stack a window names is defined
