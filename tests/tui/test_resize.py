"""The terminal resized to tiny and back, live and in replay: the app keeps running, answers
keys at every size, and draws the full screen again when there is room (docs/failure-matrix.md)."""

from __future__ import annotations

import pytest
from tui_data import screen_text, shows, started

from infertop.sources import LiveSource, ReplaySource
from infertop.tui import create_app

TINY = [(40, 12), (20, 6), (10, 3), (1, 1)]
#: every view (torch-ops flame, ops table, flame, findings, help, zoom) at each size, undone
KEYS = ["o", "o", "o", "f", "f", "i", "escape", "question_mark", "escape", "enter", "escape"]


@pytest.mark.parametrize("kind", ["live", "replay"])
@pytest.mark.slow  # in-process, but seconds long: not in make test-fast
async def test_tiny_terminal_and_back(kind: str, live_source: LiveSource,
                                      replay_source: ReplaySource) -> None:  # fmt: skip
    source = live_source if kind == "live" else replay_source
    app = create_app(source, title="infertop")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "forward")
        for width, height in TINY:
            await pilot.resize_terminal(width, height)
            await pilot.pause(0.05)
            await pilot.press(*KEYS)
            await pilot.pause(0.05)
            assert app.is_running  # a widget that cannot draw this small ends the app
        await pilot.resize_terminal(120, 40)
        await shows(pilot, app, "Model.forward" if kind == "live" else "forward")
        text = screen_text(app)
        assert "idle" in text and "preprocess" in text, text  # the stage panel, whole again
        await pilot.press("q")
    assert app.return_code in (0, None)
