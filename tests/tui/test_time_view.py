"""The stage panel's two views of time (key c): wall time of the pipeline threads, and CPU."""

from __future__ import annotations

from pathlib import Path

from infertop.collect.pyspy import RawSampleWindow
from infertop.config import Config
from infertop.model.events import Frame, TargetInfo
from infertop.model.session import Session
from infertop.record.reader import read_recording
from infertop.record.writer import RecordingWriter
from infertop.sources import ReplaySource
from infertop.tui.app import create_app
from infertop.tui.widgets.stages import StagePanel
from tests.tui.tui_data import started, wait_for

LOOP = Frame("serve", "/srv/app/server.py", 10)
ENCODE = (LOOP, Frame("TokenizersBackend._encode_plus", "/v/transformers/tokenization_utils_tokenizers.py", 88))
FORWARD = (LOOP, Frame("BertModel.forward", "/v/transformers/models/bert/modeling_bert.py", 900))
HELPER = (Frame("helper", "/srv/app/metrics.py", 5),)
TARGET = TargetInfo(pid=777, cmdline="python server.py", python="3.11.7", torch="2.13.0", started=1.8e9)


def _recording(path: Path) -> Path:
    """A pipeline thread that spends half its wall time in a tokenizer that releases the GIL
    (CPU windows see a fifth of it) and a helper thread that only sleeps."""
    session, writer = Session(), RecordingWriter(str(path))
    writer.write([TARGET])
    for i in range(20):
        wall = i % 2 == 1
        rows = [(1, "MainThread", ENCODE, 50 if wall else 10), (1, "MainThread", FORWARD, 50)]
        if wall:
            rows.append((2, "metrics", HELPER, 100))
        raw = RawSampleWindow(TARGET.started + i, TARGET.started + i + 1, 100.0, 100, tuple(rows), idle=wall)
        writer.write(session.intern(raw))
    writer.close()
    return path


def _share(app, stage: str) -> float:  # type: ignore[no-untyped-def]
    return next(s.share for s in app.displayed.totals if s.name == stage)


async def test_c_switches_the_stage_panel_between_wall_and_cpu(tmp_path: Path) -> None:
    source = ReplaySource(read_recording(str(_recording(tmp_path / "r.infertop"))), Config())
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
