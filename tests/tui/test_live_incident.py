"""The incident trigger in the live UI: the session's stage calls fire the auto trigger, the
moment is marked on the timeline (a marker in the session and its recording), the status line
offers to save it, ``x`` saves it as watch would, and a replay of that file marks the moment on
its timeline (tui/incidents.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tui_data import TARGET, ScriptedCollector, screen_text, shows, wait_for

from infertop.config import Config
from infertop.model.events import INCIDENT, CollectorStatus, Marker, StageSpan
from infertop.record.reader import read_recording
from infertop.sources import LiveSource, ReplaySource
from infertop.tui import create_app
from infertop.tui.incidents import LiveIncidents
from infertop.tui.widgets.timeline import render_timeline


class SpellAgent:
    """The agent's stage calls of a service with a spell: on start, the last 50 s of forward
    calls (10 ms each, 50 a second), the last 3 s of them 4x slower; then calls as they come."""

    name = "agent"

    def __init__(self) -> None:
        self._pending: list[object] = []
        self._next = 0.0

    def start(self) -> None:
        now = time.time()
        self._pending.append(CollectorStatus(now, self.name, "running", "agent: stage calls"))
        t = now - 50
        while t < now:
            ms = 40.0 if t > now - 3 else 10.0
            self._pending.append(StageSpan(7, "forward", t, t + ms / 1000))
            t += 0.02
        self._next = now

    def poll(self) -> list[object]:
        now = time.time()
        while self._next + 0.02 < now:
            self._pending.append(StageSpan(7, "forward", self._next, self._next + 0.01))
            self._next += 0.02
        out, self._pending = self._pending, []
        return out

    def stop(self) -> None:
        pass


def test_a_spell_is_marked_and_saved_as_watch_writes_it(tmp_path: Path) -> None:
    src = LiveSource(TARGET, Config(), collectors=[SpellAgent()], record_path=str(tmp_path / "live.infertop"))
    inc = LiveIncidents(src, before=30, after=1)
    src.start()
    src.pump()
    inc.check(time.time())
    assert inc.last is not None and inc.last[0].reason.startswith("forward.p95"), inc.last
    marks = [m for m in src.session.markers if m.text.startswith(INCIDENT)]
    assert len(marks) == 1 and "x: save it" in (inc.note(time.time()) or "")
    path = inc.save(str(tmp_path))
    assert path is not None and path.startswith(str(tmp_path / "incident-"))
    assert inc.save(str(tmp_path)) is None  # once
    deadline = time.monotonic() + 20
    while not inc.saved and time.monotonic() < deadline:
        time.sleep(0.1)
        src.pump()
        inc.check(time.time())
    assert inc.saved == [path] and "saved →" in (inc.note(time.time()) or "")
    src.stop()
    events = read_recording(path).events
    spans = [e for e in events if isinstance(e, StageSpan)]
    marker = next(e for e in events if isinstance(e, Marker) and e.text.startswith(INCIDENT))
    assert marker.t - min(s.t_start for s in spans) > 25  # the 30 s before it, as far as seen
    assert max(s.t_end for s in spans) > marker.t + 0.5  # and the second after it
    # the live recording has the moment too; a replay of either marks it on its timeline
    for rec in (path, str(tmp_path / "live.infertop")):
        assert len(ReplaySource(read_recording(rec), Config()).marks) == 1, rec


def test_the_timeline_marks_incidents() -> None:
    from infertop.analysis.snapshot import ReplayState

    text = render_timeline(ReplayState(0.0, 100.0, False, 1.0, marks=(50.0,)), 80).plain
    assert text.count("⚑") == 1
    assert "⚑" not in render_timeline(ReplayState(0.0, 100.0, False, 1.0), 80).plain


async def test_the_live_ui_offers_the_incident_and_x_saves_it(tmp_path: Path) -> None:
    here = os.getcwd()
    os.chdir(tmp_path)  # x saves into the current directory, as r records there
    try:
        src = LiveSource(TARGET, Config(), collectors=[ScriptedCollector(), SpellAgent()])
        app = create_app(src, title="infertop")
        async with app.run_test(size=(140, 40)) as pilot:
            await shows(pilot, app, "x: save it", timeout=20)
            assert "forward.p95" in screen_text(app)
            await pilot.press("x")
            await shows(pilot, app, "saving the incident", timeout=10)
            await wait_for(pilot, lambda: list(tmp_path.glob("incident-*.infertop*")), 10)
        # quitting closed it with what it had
        (saved,) = list(tmp_path.glob("incident-*.infertop"))
        assert any(isinstance(e, Marker) for e in read_recording(str(saved)).events)
    finally:
        os.chdir(here)
