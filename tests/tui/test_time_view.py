"""The stage panel's two views of time (key c): wall time of the pipeline threads, and CPU."""

from __future__ import annotations

from pathlib import Path

from infertop.config import Config
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from infertop.tui.app import create_app
from infertop.tui.widgets.stages import StagePanel
from tests.support.wall_recording import write_wall_recording
from tests.tui.tui_data import started, wait_for


def _share(app, stage: str) -> float:  # type: ignore[no-untyped-def]
    return next(s.share for s in app.displayed.totals if s.name == stage)


async def test_c_switches_the_stage_panel_between_wall_and_cpu(tmp_path: Path) -> None:
    source = ReplaySource(read_recording(str(write_wall_recording(tmp_path / "r.infertop"))), Config())
    app = create_app(source, title="t")
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot, app)
        await wait_for(pilot, lambda: app.displayed.totals)
        panel = str(app.query_one(StagePanel).render())
        assert "wall · last 5 s" in panel
        assert abs(_share(app, "preprocess") - 0.5) < 0.01  # the tokenizer's whole wall time
        assert "other" not in {s.name for s in app.displayed.totals}  # the sleeping helper: nothing
        await pilot.press("c")
        await wait_for(pilot, lambda: app.displayed.view == "cpu")
        await wait_for(pilot, lambda: "cpu · last 5 s" in str(app.query_one(StagePanel).render()))
        assert abs(_share(app, "preprocess") - 10 / 60) < 0.01  # active samples only
        await pilot.press("c")
        await wait_for(pilot, lambda: app.displayed.view == "wall")
