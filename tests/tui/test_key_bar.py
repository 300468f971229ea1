"""The key bar on the screen's last line: the keys that work now, following the focus, and a
click on a key presses it."""

from __future__ import annotations

from tui_data import screen_text, started, wait_for

from infertop.sources import ReplaySource
from infertop.tui import create_app
from infertop.tui.widgets.key_bar import KeyBar


def _bar(app) -> str:  # noqa: ANN001
    return screen_text(app).split("\n")[-1]  # the last row, blank or not


async def test_the_bar_shows_the_keys_of_what_has_the_focus(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="infertop")
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot, app)
        await wait_for(pilot, lambda: "? Help" in _bar(app))
        bar = _bar(app)
        # the flame list has the focus: its keys first, then the app's, a group under its name
        assert bar.startswith("⏎ Zoom esc Out q Quit space Play"), bar
        assert ",. Seek" in bar and "[] Speed" in bar
        await pilot.press("f", "slash")  # the flame's search box takes the focus
        # what is typed goes to the box, not to the keys: none is offered while it has the focus
        await wait_for(pilot, lambda: _bar(app) == "")
        await pilot.press("escape")  # back to the flame list, and its keys
        await wait_for(pilot, lambda: _bar(app).startswith("⏎ Zoom"))


async def test_a_click_on_a_key_presses_it(replay_source: ReplaySource) -> None:
    app = create_app(replay_source, title="infertop")
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot, app)
        await wait_for(pilot, lambda: "? Help" in _bar(app))
        assert app.view == "python"
        at = _bar(app).index("o Ops")
        await pilot.click(KeyBar, offset=(at + 2, 0))  # on its label
        await wait_for(pilot, lambda: app.view == "ops")
        at = _bar(app).index("o Ops")
        await pilot.click(KeyBar, offset=(at - 1, 0))  # the gap before it: no key
        await pilot.click(KeyBar, offset=(at, 0))  # its key
        await wait_for(pilot, lambda: app.view == "table")
        assert app.stage_filter is None  # the gap pressed nothing (not "s Stage" before it)
