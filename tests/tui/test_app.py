"""The app end to end with Pilot, over a real recording (replay) and a live source."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tui_data import (
    flame_header,
    position,
    screen_text,
    shows,
    started,
    wait_for,
)

from infertop.config import Config
from infertop.model.events import TargetInfo
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from infertop.tui import create_app
from infertop.tui.screens.help import READING, HelpScreen, help_table
from infertop.tui.widgets.flame import FlameList
from infertop.tui.widgets.stages import StagePanel

STAGE_NAMES = (
    "preprocess",
    "queue",
    "forward",
    "sync",
    "postprocess",
    "serialize",
    "other",
    "idle",
)


# -- what is on screen ---------------------------------------------------------------------------
async def test_replay_screen_at_80x24_shows_stages_and_frames(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="infertop · replay")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "Server.handle_batch")
        text = screen_text(app)
        for stage in STAGE_NAMES:
            assert stage in text, stage
        assert "<module>" in text and "Server.handle_batch" in text
        assert "p50" in text and "ms" in text  # forward has spans: latency shows
        assert "1:00.0 / 1:00.0" in text  # a replay opens at the end
        assert "pid 4242" in text and "PAUSED" in text
        await wait_for(pilot, lambda: "? Help" in screen_text(app))  # the footer comes last


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
        await shows(pilot, app, "waiting for samples…")
        await shows(pilot, app, "0:00.0 / 0:00.0")


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


async def test_s_cycles_the_stage_filter(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        assert "stage: all" in flame_header(app)
        await pilot.press("s")
        await wait_for(pilot, lambda: app.displayed.stage_filter == "preprocess")
        await pilot.pause(0.05)
        assert "stage: preprocess" in flame_header(app)
        await shows(pilot, app, "stage: preprocess")
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
            "preprocess",
            "queue",
            "forward",
            "sync",
            "postprocess",
            "serialize",
            "other",
            None,
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
        assert "all › … › Model.forward" in flame_header(app) or "Model.forward (" in flame_header(
            app
        )
        assert flame_header(app).endswith("(46.2%)")
        assert "Server.log_metrics" not in screen_text(app)
        # the zoom is a frame path: it survives new snapshots
        assert flame.graph.rows[0][0].node.frame.function == "Model.forward"  # the new root
        await pilot.press("comma", "space")  # the flame has ← and →: seek with , and .
        await wait_for(pilot, lambda: 55.5 < app.displayed.replay.position < 60)
        assert flame.zoom[-1].function == "Model.forward"
        assert flame.rows[0].node.frame.function == "Model.forward"
        await pilot.press("space", "end")
        await pilot.press("escape")
        assert flame.zoom[-1].function == "Server.handle_batch"
        assert flame.selected.frame.function == "Model.forward"  # back where we came from
        assert "Server.handle_batch" in flame_header(app)
        await pilot.press("backspace", "escape", "escape", "escape")
        assert flame.zoom == [] and flame_header(app).endswith("path: all")


async def test_zoom_falls_back_to_root_when_the_path_disappears(
    replay_source: ReplaySource,
) -> None:
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
        await pilot.press("t")  # the indented list
        assert flame.style == "list" and "Python list" in flame_header(app)
        await pilot.press("pagedown")
        assert flame.cursor > 3
        await pilot.press(*["pagedown"] * 5)
        assert flame.cursor == len(flame.rows) - 1
        assert flame.scroll_offset.y > 0  # the cursor stays in view
        await pilot.press(*["pageup"] * 5, "up")
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


@pytest.mark.slow  # in-process, but seconds long: not in make test-fast
async def test_replay_keys_move_the_timeline(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        assert position(app) == "1:00.0 / 1:00.0"
        await pilot.press("comma")
        await wait_for(pilot, lambda: position(app) == "0:55.0 / 1:00.0")
        await pilot.press("home")
        await wait_for(pilot, lambda: position(app) == "0:00.0 / 1:00.0")
        await pilot.press("full_stop", "greater_than_sign")
        await wait_for(pilot, lambda: position(app) == "0:10.0 / 1:00.0")
        await pilot.press("less_than_sign")
        await wait_for(pilot, lambda: position(app) == "0:05.0 / 1:00.0")
        await pilot.press("full_stop")
        await wait_for(pilot, lambda: position(app) == "0:10.0 / 1:00.0")
        await shows(pilot, app, "0:10.0 / 1:00.0")
        await pilot.press("end")
        await wait_for(pilot, lambda: position(app) == "1:00.0 / 1:00.0")
        await pilot.press("home", "space")
        await wait_for(pilot, lambda: app.displayed.replay.playing)
        await shows(pilot, app, "playing")
        assert "PAUSED" not in screen_text(app)
        await wait_for(pilot, lambda: app.displayed.replay.position >= 0.5)
        await pilot.press("p")  # p is play/pause in a replay
        await wait_for(pilot, lambda: not app.displayed.replay.playing)
        held = app.displayed.replay.position
        await pilot.pause(0.4)
        assert app.displayed.replay.position == held
        await shows(pilot, app, "paused")
        await pilot.press("right_square_bracket", "right_square_bracket")
        await wait_for(pilot, lambda: app.displayed.replay.speed == 4.0)
        await shows(pilot, app, "4×")
        await pilot.press(*["left_square_bracket"] * 4)
        await wait_for(pilot, lambda: app.displayed.replay.speed == 0.25)
        await shows(pilot, app, "1/4×")
        # ← and → are the flame's while it has the focus; elsewhere (the ops table) they seek
        await pilot.press("o", "o", "end", "left")
        await wait_for(pilot, lambda: position(app) == "0:55.0 / 1:00.0")
        await pilot.press("right")
        await wait_for(pilot, lambda: position(app) == "1:00.0 / 1:00.0")


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


async def test_z_shows_the_plumbing_frames_and_n_merges_lines() -> None:
    """On the recorded text-generation service: its stacks go through torch's
    ``Module._call_impl``, folded by default; ``z`` draws it, ``n`` merges a function's lines."""
    from tests.support import data

    rec = read_recording(str(data.DATA / "recordings" / "textgen_service.infertop"))
    app = create_app(ReplaySource(rec, Config()), title="infertop")

    def names() -> set[str]:
        snap = app.displayed
        out, stack = set(), list(snap.flame.children.values()) if snap else []
        while stack:
            node = stack.pop()
            out.add(node.frame.function)
            stack.extend(node.children.values())
        return out

    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        assert "Module._call_impl" not in names() and "Batcher.serve" in names()
        await pilot.press("z")
        await wait_for(pilot, lambda: "Module._call_impl" in names())
        await pilot.press("z")
        await wait_for(pilot, lambda: "Module._call_impl" not in names())
        await pilot.press("n")
        await wait_for(pilot, lambda: app.displayed.shape.lines is False)
        flame = app.displayed.flame
        assert flame.total > 0 and all(c.frame.line == 0 for c in flame.children.values())


async def test_replay_with_a_base_colours_what_grew_red_and_what_shrank_blue() -> None:
    """replay (naive tokenizer) --base (the plain service): the tokenizer took 65 points more of
    the time, the model 30 less; the detail line gives the base's share and the change."""
    from infertop.analysis.base_profile import BaseProfile
    from infertop.tui.palette import diff_color
    from tests.support import data

    recs = data.DATA / "recordings"
    base = BaseProfile(
        ReplaySource(read_recording(str(recs / "textgen_service.infertop")), Config()).session,
        "textgen_service.infertop",
    )
    src = ReplaySource(read_recording(str(recs / "textgen_slow_tokenizer.infertop")), Config())
    app = create_app(src, title="infertop", base=base)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        flame = app.query_one(FlameList)
        await wait_for(pilot, lambda: flame.base is not None)
        colour = flame._colour()
        assert colour is not None

        def node(name: str):
            stack = [app.displayed.flame]
            while stack:
                n = stack.pop()
                if n.frame is not None and n.frame.function == name:
                    return n
                stack.extend(n.children.values())
            raise AssertionError(name)

        assert colour(node("Tokenizer.encode_batch")) == diff_color(0.5)  # the reddest
        assert colour(node("TinyCausalLM.forward")) == diff_color(-0.2)  # the bluest
        assert "vs base textgen_service.infertop" in flame_header(app)
        await pilot.press("down", "down", "down")  # Batcher.run > serve > tokenize_batch
        await wait_for(pilot, lambda: "pts)" in screen_text(app))
        # the ops flame has no base: stage colours there
        await pilot.press("o")
        await wait_for(pilot, lambda: flame.mode == "ops")
        assert flame._colour() is None


# -- what a new user reads -------------------------------------------------------------------------
def _plain(renderable: object, width: int = 400) -> str:
    """What a renderable shows, on one line per row, at a width that wraps nothing."""
    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def test_help_shows_every_keys_text_as_written(replay_source: ReplaySource) -> None:
    """A key's text is plain words, never console markup: ``[flame] fold`` in the `z` key's
    text was read as a markup tag and the help showed ``( fold in the config)``."""
    rows = create_app(replay_source, title="t").help_rows()
    shown = _plain(help_table(rows))
    assert "([flame] fold in the config)" in shown
    for key, text in rows:
        assert text in shown, (key, text)


def test_help_and_docs_explain_the_status_lines_lag_and_err() -> None:
    """``lag`` and ``err N`` on the status line: what they count, and what to do about them."""
    assert "lag, how far behind its schedule py-spy's sampling fell" in READING
    assert "lower --rate" in READING
    assert "err N, the samples py-spy dropped in the session" in READING
    assert "compare it with the CPU view (c)" in READING
    ui = (Path(__file__).parents[2] / "docs" / "ui.md").read_text(encoding="utf-8")
    section = ui.split("## The status line", 1)[1].split("\n## ", 1)[0]
    assert "**`lag`**" in section and "**`err N`**" in section and "`--rate`" in section


async def test_the_help_screen_shows_the_status_line_explained(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(120, 60)) as pilot:
        await started(pilot, app)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        box = app.screen.query_one("#help-box")

        def at_the_end() -> bool:  # scrolled once the box has its height
            box.scroll_end(animate=False)
            return "err N, the samples py-spy dropped" in screen_text(app)

        await wait_for(pilot, at_the_end)


async def test_idle_is_marked_outside_the_stages_100_percent(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "idle")
        idle = next(ln for ln in screen_text(app).splitlines() if ln.lstrip("│ ").startswith("idle"))
        assert "not in" in idle and "100 %" in idle, idle  # the words fitting the bar's column


async def test_one_op_window_is_one_window(tmp_path: Path) -> None:
    """The committed textgen recording has one torch-profiler window: the status line and the
    ops table's header say so in the singular."""
    rec = Path(__file__).parents[1] / "data" / "recordings" / "textgen_service.infertop"
    app = create_app(ReplaySource(read_recording(str(rec)), Config()), title="t")
    async with app.run_test(size=(240, 40)) as pilot:  # wide: the status line's long forms
        await wait_for(pilot, lambda: app.displayed is not None and app.displayed.samples > 0)
        await shows(pilot, app, "1 op window")
        assert "1 op windows" not in screen_text(app)
        await pilot.press("o", "o")  # the ops table
        await shows(pilot, app, "1 window, 0.1 s profiled")
