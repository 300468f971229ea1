"""The tail view (key l): a stage's slow calls against its typical ones, in replay and live, on
the committed recording of ``pauses_target.py`` (one call in 50 of ``preprocess`` takes
``rare_slow_path``; tests/data/recordings/README.md); and what it says without call samples."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tui_data import screen_text, shows, wait_for

from infertop.config import Config
from infertop.model.events import CallSamples, TargetInfo
from infertop.record.reader import read_recording
from infertop.record.stream import RecordingStream
from infertop.record.writer import RecordingWriter
from infertop.sources import LiveSource, ReplaySource
from infertop.tui import create_app
from infertop.tui.palette import diff_color
from infertop.tui.screens.help import READING, HelpScreen
from infertop.tui.screens.tail import TailFlameList, TailScreen
from tests.support import data

TAIL = data.DATA / "recordings" / "tail_pauses.infertop"
NO_SPANS = data.DATA / "recordings" / "textgen_service.infertop"  # Python 3.11, no stage calls


def _replay(path: Path, config: Config | None = None) -> ReplaySource:
    if not path.is_file():
        pytest.fail(f"test data missing: {path}")
    return ReplaySource(read_recording(str(path)), config or Config())


async def _open(pilot, app) -> TailScreen:
    await wait_for(pilot, lambda: app.displayed is not None, 20.0)
    await pilot.press("l")
    await wait_for(pilot, lambda: isinstance(app.screen, TailScreen))
    screen = app.screen
    await wait_for(pilot, lambda: screen.snapshot is not None and screen.snapshot.ui.tail_view)
    await pilot.pause(0.1)
    return screen


def _lines_after(text: str, header: str) -> list[str]:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if header in line)
    return lines[at + 1 :]


async def test_l_opens_the_tail_of_the_stage_with_most_calls(tmp_path: Path) -> None:
    app = create_app(_replay(TAIL), title="infertop")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(pilot, app)
        assert screen.stage == "preprocess"  # 851 calls, postprocess 834
        await shows(pilot, app, "rare_slow_path")
        text = screen_text(app)
        assert "tail · preprocess (1/2)" in text
        assert "851 calls: 9 slow ≥ 40.2 ms (p99), 427 typical ≤ 5.2 ms (p50)" in text
        # the frame the slow calls have and the typical ones do not comes first
        first = _lines_after(text, "frames the slow calls have more of")[0]
        assert "rare_slow_path" in first and "pauses_target.py:25" in first
        assert "94.1%" in first and "0.0%" in first
        # the slowest calls, longest first, with their start in the session and their thread
        calls = _lines_after(text, "slowest calls")
        assert "at 0:00.68" in calls[0] and "44.4 ms" in calls[0] and "MainThread" in calls[0]
        assert "41.3 ms" in calls[1]
        # what they overlapped, every kind named, our own profiler's windows too
        for label in ("garbage collection", "GIL held elsewhere", "waiting in a queue"):
            assert label in text
        assert "host-device syncs" in text and "our own profiler windows" in text
        gil = next(line for line in text.splitlines() if "GIL held elsewhere" in line)
        assert "9.4%" in gil


async def test_the_flame_is_the_slow_calls_coloured_against_the_typical_ones() -> None:
    app = create_app(_replay(TAIL), title="infertop")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(pilot, app)
        flame = screen.query_one(TailFlameList)
        assert flame.root is not None and flame.root.total == 34  # the slow calls' samples
        assert flame.has_focus
        node = next(
            n
            for n in _walk(flame.root)
            if n.frame is not None and n.frame.function == "rare_slow_path"
        )
        assert flame.base is not None and flame.base.total == 260  # the typical calls'
        colour = flame._colour()
        assert colour is not None and colour(node) == diff_color(0.94)  # grew the most: red
        # a function is one call path whatever line its caller is at (as the base is matched):
        # encode_batch, at the line calling rare_slow_path and at the other, is all its calls
        lines = [n for n in _walk(flame.root) if n.frame and n.frame.function == "encode_batch"]
        assert len(lines) == 2 and {colour(n) for n in lines} == {diff_color(0.0)}
        assert flame.reveal(node.frame)
        await pilot.pause(0.1)
        detail = str(screen.query_one("#tail-detail").render())
        assert "rare_slow_path" in detail and "(typical 0.0%, +94.1 pts)" in detail


def _walk(root):
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


async def test_s_cycles_the_stages_and_esc_closes() -> None:
    app = create_app(_replay(TAIL), title="infertop")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(pilot, app)
        await pilot.press("s")
        await shows(pilot, app, "tail · postprocess (2/2)")
        assert screen.stage == "postprocess"
        assert "none: the slow calls ran the code typical calls run" in screen_text(app)
        await pilot.press("S")
        await shows(pilot, app, "tail · preprocess (1/2)")
        # esc zooms the flame out first, then closes the view
        await pilot.press("enter")
        await wait_for(pilot, lambda: bool(screen.query_one(TailFlameList).zoom))
        await pilot.press("escape")
        await wait_for(pilot, lambda: not screen.query_one(TailFlameList).zoom)
        assert isinstance(app.screen, TailScreen)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, TailScreen))


async def test_the_worker_computes_tails_only_while_the_view_is_open() -> None:
    app = create_app(_replay(TAIL), title="infertop")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.displayed is not None, 20.0)
        assert app.latest.tails == () and app.latest.ui.tail_view is None
        screen = await _open(pilot, app)
        assert [t.stage for t in screen.snapshot.tails] == ["postprocess", "preprocess"]
        before = app.latest
        await pilot.press("l")  # l closes it too
        await wait_for(pilot, lambda: not isinstance(app.screen, TailScreen))
        await wait_for(pilot, lambda: app.latest is not before)
        assert app.latest.tails == () and app.latest.ui.tail_view is None


async def test_the_view_opens_on_the_flame_s_stage_and_follows_a_seek() -> None:
    app = create_app(_replay(TAIL), title="infertop")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.displayed is not None, 20.0)
        while app.stage_filter != "postprocess":
            await pilot.press("s")
        await pilot.pause(0.1)
        screen = await _open(pilot, app)
        assert screen.stage == "postprocess"
        calls = screen.tail.calls
        await pilot.press("comma")  # 5 s back, under the open view
        await wait_for(pilot, lambda: screen.tail is not None and screen.tail.calls < calls)
        assert isinstance(app.screen, TailScreen)


async def test_a_given_slow_threshold_is_said() -> None:
    config = replace(Config(), slow_ms=(("preprocess", 30.0),))
    app = create_app(_replay(TAIL, config), title="infertop")
    async with app.run_test(size=(120, 40)) as pilot:
        await _open(pilot, app)
        await shows(pilot, app, "slow ≥ 30.0 ms (given)")


def _without_call_samples(path: Path) -> Path:
    """The recording as an agent without the call sampler would have made it."""
    writer = RecordingWriter(str(path))
    events = RecordingStream(str(TAIL))
    writer.write([ev for ev in events if not isinstance(ev, CallSamples)])
    writer.close()
    return path


async def test_without_call_samples_it_says_why_and_still_lists_the_slowest_calls(
    tmp_path: Path,
) -> None:
    app = create_app(_replay(_without_call_samples(tmp_path / "spans.infertop")), title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(pilot, app)
        await shows(pilot, app, "No call samples:")
        text = screen_text(app)
        assert "--stage STAGE=FUNCTION" in text and "infertop.stage(" in text
        assert "44.4 ms" in text and "MainThread" in text  # the spans are there
        gil = next(line for line in text.splitlines() if "GIL held elsewhere" in line)
        assert "not measured" in gil
        assert "rare_slow_path" not in text  # no frames, no flame
        assert not screen.query_one(TailFlameList).display


async def test_a_replay_without_stage_calls_says_why_in_one_line() -> None:
    app = create_app(_replay(NO_SPANS), title="infertop")
    async with app.run_test(size=(80, 24)) as pilot:
        await _open(pilot, app)
        await shows(pilot, app, "No timed stage calls, so no tail")
        text = screen_text(app)
        # a 3.11 target: the agent times --stage rules there too (wrapping them), so the one
        # line says which stages have no calls, on which Python, why, and the rule to give;
        # not that its Python cannot
        words = " ".join(text.replace("│", " ").split())  # the line wraps in its box
        assert "forward, serialize, preprocess, postprocess: no timed calls" in words, text
        assert "on Python 3.11.7" in words and "no rule names their functions" in words, text
        assert "--stage forward=FUNCTION" in words, text
        assert "3.12" not in text


class _RecordedAgent:
    """A live collector that hands over a recording's events (GC pauses, loop lag, stage calls
    and call samples) on its first poll, as the agent's would come."""

    name = "agent"

    def __init__(self, path: Path) -> None:
        self.events = [ev for ev in RecordingStream(str(path)) if not isinstance(ev, TargetInfo)]

    def start(self) -> None:
        pass

    def poll(self) -> list[object]:
        out, self.events = self.events, []
        return out

    def stop(self) -> None:
        pass


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
async def test_live_the_worker_computes_the_tails_too(paused: bool) -> None:
    """Paused, the panels keep their picture, and the view opened then still gets its tails."""
    target = next(ev for ev in RecordingStream(str(TAIL)) if isinstance(ev, TargetInfo))
    source = LiveSource(target, Config(), collectors=[_RecordedAgent(TAIL)])
    app = create_app(source, title="infertop")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.latest is not None and app.latest.samples > 0, 20.0)
        if paused:
            await pilot.press("p")
            await wait_for(pilot, lambda: app.paused)
        await _open(pilot, app)
        await shows(pilot, app, "rare_slow_path")
        await shows(pilot, app, "44.4 ms")


async def test_help_lists_the_tail_key() -> None:
    app = create_app(_replay(TAIL), title="infertop")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.displayed is not None, 20.0)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        rows = dict(app.help_rows())
        assert "tail view" in rows["l"]
        await shows(pilot, app, "tail view: a stage's slow calls against its typical ones")
        assert "l opens the tail view" in READING
