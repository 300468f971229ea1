"""Live mode end to end (pause, recording, exit of the target, worker errors) and notes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tui_data import (
    TARGET,
    ScriptedCollector,
    screen_text,
    shows,
    started,
    wait_for,
    write_recording,
)

from infertop.config import Config
from infertop.model.events import SampleWindow, TargetInfo
from infertop.record.reader import read_recording
from infertop.sources import LiveSource, ReplaySource
from infertop.tui import create_app
from infertop.tui.widgets.stages import StagePanel
from infertop.tui.widgets.status import StatusLine


# -- live ------------------------------------------------------------------------------------------
async def test_live_screen_at_120x40(live_source: LiveSource) -> None:
    app = create_app(live_source, title="infertop · pid 4242")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "Model.forward")
        text = screen_text(app)
        assert "infertop · pid 4242" in text  # the panel title, not in compact mode
        assert "forward" in text and "Model.forward" in text
        assert "not recording" in text and "py-spy: running" in text
        assert "python 3.11.7" in text


async def test_waiting_for_samples_when_there_is_no_data(tmp_path: Path) -> None:
    source = LiveSource(TARGET, Config(), collectors=[ScriptedCollector(window_s=3600)])
    app = create_app(source, title="infertop")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.displayed is not None)
        await pilot.pause(0.05)
        assert app.displayed.samples == 0
        await shows(pilot, app, "waiting for samples…")
        await pilot.press("s", "enter", "escape", "down", "p", "p")  # nothing breaks on no data
        await shows(pilot, app, "waiting for samples…")


async def test_p_pauses_the_live_display(live_source: LiveSource) -> None:
    app = create_app(live_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        status = app.query_one(StatusLine)
        assert "PAUSED" not in screen_text(app)
        await pilot.press("p")
        await pilot.pause(0.05)
        assert app.paused and status.is_paused
        await shows(pilot, app, "PAUSED")
        frozen = app.displayed
        # collection goes on: newer snapshots arrive, the panels keep the frozen one
        await wait_for(pilot, lambda: app.latest.samples > frozen.samples)
        assert app.displayed is frozen
        assert app.query_one(StagePanel).snapshot is frozen
        await pilot.press("p")
        await pilot.pause(0.05)
        assert not app.paused
        await wait_for(pilot, lambda: "PAUSED" not in screen_text(app))
        assert app.displayed is app.latest


async def test_r_records_and_r_again_stops(
    live_source: LiveSource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app = create_app(live_source, title="t")
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "not recording")
        await pilot.press("r")
        await wait_for(pilot, lambda: app.latest.recording is not None)
        name = app.latest.recording
        assert name.startswith("infertop-4242-") and name.endswith(".infertop")
        assert (tmp_path / name).exists()
        first = app.latest.recording_bytes  # the prelude: everything defined so far
        await wait_for(pilot, lambda: app.latest.recording_bytes > first + 200)  # + windows
        await shows(pilot, app, "● REC")  # the status line
        await shows(pilot, app, "recording to")  # the notification
        await pilot.press("r")
        await wait_for(pilot, lambda: app.latest.recording is None)
        await pilot.pause(0.1)
        await shows(pilot, app, "not recording")
        await shows(pilot, app, "recording stopped")
    rec = read_recording(str(tmp_path / name))
    assert rec.warning is None
    assert isinstance(rec.events[0], TargetInfo) and rec.events[0].pid == 4242
    assert sum(isinstance(e, SampleWindow) for e in rec.events) >= 2
    # and it replays
    replayed = ReplaySource(rec, Config())
    assert replayed.session.windows and replayed.session.symbols.frames


async def test_r_with_a_preset_record_path_toggles_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    source = LiveSource(
        TARGET, Config(), collectors=[ScriptedCollector()], record_path="run.infertop"
    )
    app = create_app(source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        assert app.latest.recording == "run.infertop"
        await shows(pilot, app, "● REC")
        await pilot.press("r")
        await wait_for(pilot, lambda: app.latest.recording is None)
        await pilot.press("r")  # the preset file exists: a new one next to it, never overwritten
        await wait_for(pilot, lambda: app.latest.recording is not None)
        assert app.latest.recording == "run-2.infertop"
    assert read_recording(str(tmp_path / "run.infertop")).warning is None
    assert read_recording(str(tmp_path / "run-2.infertop")).warning is None


async def test_live_help_lists_live_keys(live_source: LiveSource) -> None:
    app = create_app(live_source, title="t")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        await shows(pilot, app, "infertop help (live)")
        text = screen_text(app)
        assert "infertop help (live)" in text and "recording" in text and "freeze" in text


# -- states ----------------------------------------------------------------------------------------
async def test_target_exit_keeps_the_final_data_on_screen() -> None:
    source = LiveSource(TARGET, Config(), collectors=[ScriptedCollector(exit_after=3)])
    app = create_app(source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.latest is not None and app.latest.exited is not None)
        await pilot.pause(0.3)
        assert app.is_running
        await shows(pilot, app, "target exited")
        text = screen_text(app)
        assert "target exited" in text and "forward" in text and "<module>" in text


async def test_damaged_recording_note_shows(tmp_path: Path) -> None:
    path = write_recording(tmp_path / "cut.infertop", windows=20)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # a writer killed mid-record
    rec = read_recording(str(path))
    assert rec.warning
    app = create_app(ReplaySource(rec, Config()), title="t")
    async with app.run_test(size=(120, 30)) as pilot:
        await started(pilot, app)
        await pilot.pause(0.05)
        await shows(pilot, app, "⚠")
        await shows(pilot, app, "cut short")


class FailingCollector(ScriptedCollector):
    """Produces a few windows, then its poll raises (a broken collector must not kill the UI)."""

    def poll(self) -> list[object]:
        if self._made >= 2:
            raise RuntimeError("collector exploded")
        return super().poll()


async def test_worker_errors_show_in_the_status_line_and_the_ui_lives_on() -> None:
    source = LiveSource(TARGET, Config(), collectors=[FailingCollector()])
    app = create_app(source, title="t")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.error is not None)
        await pilot.pause(0.05)
        await shows(pilot, app, "✖ ingest: RuntimeError: collector exploded")
        assert app.worker.alive
        await pilot.press("s")  # commands are still answered
        await wait_for(pilot, lambda: app.displayed.stage_filter == app.stage_filter)
        assert app.displayed.stage_filter is not None


async def test_record_to_an_unwritable_place_reports_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    source = LiveSource(
        TARGET, Config(), collectors=[ScriptedCollector()], record_path="runs/a.infertop"
    )
    app = create_app(source, title="t")
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await started(pilot, app)
        await pilot.press("r")
        await wait_for(pilot, lambda: app.latest.recording is None)
        shutil.rmtree(tmp_path / "runs")  # the next start cannot open its file
        await pilot.press("r")
        await wait_for(pilot, lambda: "cannot record" in screen_text(app))
        await shows(pilot, app, "runs/a.infertop")
        assert app.latest.recording is None and not app._recording
        assert app.worker.alive and app.is_running
