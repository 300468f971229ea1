"""The app end to end with Pilot, over a real recording (replay) and a live source."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tui_data import TARGET, ScriptedCollector, screen_text, wait_for, write_recording

from infertop.config import Config
from infertop.model.events import SampleWindow, TargetInfo
from infertop.record.reader import read_recording
from infertop.sources import LiveSource, ReplaySource
from infertop.tui import create_app
from infertop.tui.screens.help import HelpScreen
from infertop.tui.widgets.flame import FlameList, FlamePanel
from infertop.tui.widgets.stages import StagePanel
from infertop.tui.widgets.status import StatusLine
from infertop.tui.widgets.timeline import Timeline

STAGE_NAMES = ("preprocess", "queue", "forward", "sync", "postprocess", "serialize", "other", "idle")


def flame_header(app) -> str:  # type: ignore[no-untyped-def]
    return app.query_one(FlamePanel).header_text(200)


def position(app) -> str:  # type: ignore[no-untyped-def]
    return app.query_one(Timeline).position_text


async def started(pilot, app) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: app.displayed is not None and app.displayed.samples > 0)


# -- what is on screen ---------------------------------------------------------------------------
async def test_replay_screen_at_80x24_shows_stages_and_frames(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="infertop · replay")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.pause(0.1)
        text = screen_text(app)
        for stage in STAGE_NAMES:
            assert stage in text, stage
        assert "<module>" in text and "Server.handle_batch" in text
        assert "p50" in text and "ms" in text  # forward has spans: latency shows
        assert "1:00.0 / 1:00.0" in text  # a replay opens at the end
        assert "pid 4242" in text and "PAUSED" in text
        await wait_for(pilot, lambda: "? Help" in screen_text(app))  # the footer comes last


async def test_live_screen_at_120x40(live_source: LiveSource) -> None:
    app = create_app(live_source, title="infertop · pid 4242")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await pilot.pause(0.1)
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
        assert "waiting for samples…" in screen_text(app)
        await pilot.press("s", "enter", "escape", "down", "p", "p")  # nothing breaks on no data
        assert "waiting for samples…" in screen_text(app)


async def test_empty_recording_replays(tmp_path: Path) -> None:
    from infertop.record.writer import RecordingWriter

    path = tmp_path / "empty.infertop"
    writer = RecordingWriter(str(path))
    writer.write([TargetInfo(pid=1, cmdline="python x.py", started=1.0)])
    writer.close()
    app = create_app(ReplaySource(read_recording(str(path)), Config()), title="empty")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.displayed is not None)
        await pilot.press("space", "left", "right", "home", "end")
        await pilot.pause(0.1)
        assert "waiting for samples…" in screen_text(app)
        assert "0:00.0 / 0:00.0" in screen_text(app)


# -- keys ------------------------------------------------------------------------------------------
async def test_q_quits_and_on_exit_gets_the_last_snapshot(replay_source: ReplaySource) -> None:
    seen = []
    app = create_app(replay_source, title="t", on_exit=seen.append)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running
    assert len(seen) == 1 and seen[0] is not None and seen[0].samples > 0
    assert not app.worker.alive


async def test_p_pauses_the_live_display(live_source: LiveSource) -> None:
    app = create_app(live_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        status = app.query_one(StatusLine)
        assert "PAUSED" not in screen_text(app)
        await pilot.press("p")
        await pilot.pause(0.05)
        assert app.paused and status.is_paused
        assert "PAUSED" in screen_text(app)
        frozen = app.displayed
        # collection goes on: newer snapshots arrive, the panels keep the frozen one
        await wait_for(pilot, lambda: app.latest.samples > frozen.samples)
        assert app.displayed is frozen
        assert app.query_one(StagePanel).snapshot is frozen
        await pilot.press("p")
        await pilot.pause(0.05)
        assert not app.paused and "PAUSED" not in screen_text(app)
        assert app.displayed is app.latest


async def test_r_records_and_r_again_stops(
    live_source: LiveSource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app = create_app(live_source, title="t")
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await started(pilot, app)
        assert "not recording" in screen_text(app)
        await pilot.press("r")
        await wait_for(pilot, lambda: app.latest.recording is not None)
        name = app.latest.recording
        assert name.startswith("infertop-4242-") and name.endswith(".infertop")
        assert (tmp_path / name).exists()
        first = app.latest.recording_bytes  # the prelude: everything defined so far
        await wait_for(pilot, lambda: app.latest.recording_bytes > first + 200)  # + windows
        await pilot.pause(0.1)
        text = screen_text(app)
        assert "● REC" in text and "recording to" in text  # status and notification
        await pilot.press("r")
        await wait_for(pilot, lambda: app.latest.recording is None)
        await pilot.pause(0.1)
        assert "not recording" in screen_text(app)
        assert "recording stopped" in screen_text(app)
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
    source = LiveSource(TARGET, Config(), collectors=[ScriptedCollector()], record_path="run.infertop")
    app = create_app(source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        assert app.latest.recording == "run.infertop" and "● REC" in screen_text(app)
        await pilot.press("r")
        await wait_for(pilot, lambda: app.latest.recording is None)
        await pilot.press("r")  # the preset file exists: a new one next to it, never overwritten
        await wait_for(pilot, lambda: app.latest.recording is not None)
        assert app.latest.recording == "run-2.infertop"
    assert read_recording(str(tmp_path / "run.infertop")).warning is None
    assert read_recording(str(tmp_path / "run-2.infertop")).warning is None


async def test_s_cycles_the_stage_filter(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        assert "stage: all" in flame_header(app)
        await pilot.press("s")
        await wait_for(pilot, lambda: app.displayed.stage_filter == "preprocess")
        await pilot.pause(0.05)
        assert "stage: preprocess" in flame_header(app)
        assert "stage: preprocess" in screen_text(app)
        rows = app.query_one(FlameList).rows
        assert rows and all(set(r.node.stages) == {"preprocess"} for r in rows)
        functions = {r.node.frame.function for r in rows}
        assert "Tokenizer._bpe" in functions and "Model.forward" not in functions
        assert "Model.forward" not in screen_text(app)
        seen = ["preprocess"]
        for _ in range(7):  # queue forward sync postprocess serialize other, then all again
            await pilot.press("s")
            await wait_for(pilot, lambda: app.displayed.stage_filter == app.stage_filter)
            seen.append(app.displayed.stage_filter)
        assert seen == [
            "preprocess", "queue", "forward", "sync", "postprocess", "serialize", "other", None
        ]
        assert "stage: all" in flame_header(app)


async def test_enter_zooms_and_escape_zooms_out(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        flame = app.query_one(FlameList)
        assert flame.has_focus and flame.cursor == 0
        for _ in range(20):
            if flame.selected.frame.function == "Model.forward":
                break
            await pilot.press("down")
        assert flame.selected.frame.function == "Model.forward"
        await pilot.press("enter")
        assert flame.rows[0].node.frame.function == "Model.forward"
        assert "all › … › Model.forward" in flame_header(app) or "Model.forward (" in flame_header(app)
        assert flame_header(app).endswith("(46.2%)")
        assert "Server.log_metrics" not in screen_text(app)
        # the zoom is a frame path: it survives new snapshots
        await pilot.press("left", "space")
        await wait_for(pilot, lambda: 55.5 < app.displayed.replay.position < 60)
        assert flame.zoom[-1].function == "Model.forward"
        assert flame.rows[0].node.frame.function == "Model.forward"
        await pilot.press("space", "end")
        await pilot.press("escape")
        assert flame.zoom[-1].function == "Server.handle_batch"
        assert flame.selected.frame.function == "Model.forward"  # back where we came from
        assert "Server.handle_batch" in flame_header(app)
        await pilot.press("backspace", "escape", "escape", "escape")
        assert flame.zoom == [] and "stage: all · all" in flame_header(app)


async def test_zoom_falls_back_to_root_when_the_path_disappears(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        flame = app.query_one(FlameList)
        while flame.selected.frame.function != "Model.forward":
            await pilot.press("down")
        await pilot.press("enter")
        assert flame.zoom
        await pilot.press("s")  # preprocess: no Model.forward frames
        await wait_for(pilot, lambda: app.displayed.stage_filter == "preprocess")
        await pilot.pause(0.05)
        assert flame.zoom == [] and flame.rows[0].node.frame.function == "<module>"


async def test_pagedown_and_pageup_move_the_cursor(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        flame = app.query_one(FlameList)
        await pilot.press("pagedown")
        assert flame.cursor > 3
        await pilot.press("pagedown", "pagedown", "pagedown")
        assert flame.cursor == len(flame.rows) - 1
        assert flame.scroll_offset.y > 0  # the cursor stays in view
        await pilot.press("pageup", "pageup", "pageup", "pageup", "up")
        assert flame.cursor == 0 and flame.scroll_offset.y == 0


async def test_question_mark_opens_help_and_escape_closes_it(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.press("question_mark")
        await pilot.pause(0.05)
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        assert "infertop help (replay)" in text and "play / pause" in text
        keys = " ".join(k for k, _ in app.help_rows())
        for key in ("q", "space / p", "←", "→", "home", "end", "[", "]", "s", "f", "?", "enter"):
            assert key in keys
        await pilot.press("escape")
        await pilot.pause(0.05)
        assert not isinstance(app.screen, HelpScreen)
        assert app.query_one(FlameList).zoom == []  # escape closed help, it did not reach the list


async def test_live_help_lists_live_keys(live_source: LiveSource) -> None:
    app = create_app(live_source, title="t")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause(0.05)
        text = screen_text(app)
        assert "infertop help (live)" in text and "recording" in text and "freeze" in text


async def test_replay_keys_move_the_timeline(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        assert position(app) == "1:00.0 / 1:00.0"
        await pilot.press("left")
        await wait_for(pilot, lambda: position(app) == "0:55.0 / 1:00.0")
        await pilot.press("home")
        await wait_for(pilot, lambda: position(app) == "0:00.0 / 1:00.0")
        await pilot.press("right", "right")
        await wait_for(pilot, lambda: position(app) == "0:10.0 / 1:00.0")
        assert "0:10.0 / 1:00.0" in screen_text(app)
        await pilot.press("end")
        await wait_for(pilot, lambda: position(app) == "1:00.0 / 1:00.0")
        await pilot.press("home", "space")
        await wait_for(pilot, lambda: app.displayed.replay.playing)
        assert "playing" in screen_text(app) and "PAUSED" not in screen_text(app)
        await wait_for(pilot, lambda: app.displayed.replay.position >= 0.5)
        await pilot.press("p")  # p is play/pause in a replay
        await wait_for(pilot, lambda: not app.displayed.replay.playing)
        held = app.displayed.replay.position
        await pilot.pause(0.4)
        assert app.displayed.replay.position == held and "paused" in screen_text(app)
        await pilot.press("right_square_bracket", "right_square_bracket")
        await wait_for(pilot, lambda: app.displayed.replay.speed == 4.0)
        assert "4×" in screen_text(app)
        await pilot.press(*["left_square_bracket"] * 4)
        await wait_for(pilot, lambda: app.displayed.replay.speed == 0.25)
        assert "1/4×" in screen_text(app)


async def test_f_gives_the_flame_view_the_whole_screen(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        before = app.query_one(FlameList).size.height
        await pilot.press("f")
        await pilot.pause(0.05)
        assert not app.query_one(StagePanel).display
        assert app.query_one(FlameList).size.height > before + 5
        await pilot.press("f")
        await pilot.pause(0.05)
        assert app.query_one(StagePanel).display


# -- states ----------------------------------------------------------------------------------------
async def test_target_exit_keeps_the_final_data_on_screen() -> None:
    source = LiveSource(TARGET, Config(), collectors=[ScriptedCollector(exit_after=3)])
    app = create_app(source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.latest is not None and app.latest.exited is not None)
        await pilot.pause(0.3)
        assert app.is_running
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
        assert "⚠" in screen_text(app) and "cut short" in screen_text(app)


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
        assert "✖ ingest: RuntimeError: collector exploded" in screen_text(app)
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
        assert "runs/a.infertop" in screen_text(app)
        assert app.latest.recording is None and not app._recording
        assert app.worker.alive and app.is_running
