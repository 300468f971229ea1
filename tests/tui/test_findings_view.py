"""The findings view (key i): ranked, live, with evidence and fix; enter goes to the site."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tui_data import screen_text, shows, started, wait_for, write_recording

from infertop.config import Config, FindingThresholds
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from infertop.tui import create_app
from infertop.tui.screens.findings import FindingsScreen, evidence_lines
from infertop.tui.widgets.flame import FlameList
from infertop.tui.widgets.flame_panel import FlamePanel
from infertop.tui.widgets.ops import OpsTable
from tests.support import data

#: the sample recording's preprocess is ~7 % of active samples: fire preprocess-hot at 5 %
CONFIG = replace(Config(), findings=FindingThresholds(preprocess_hot_share=0.05))


@pytest.fixture
def source(tmp_path: Path) -> ReplaySource:
    path = write_recording(tmp_path / "ops.infertop", ops=True)
    return ReplaySource(read_recording(str(path)), CONFIG)


async def _open(pilot, app) -> FindingsScreen:
    await pilot.press("i")
    await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen))
    await pilot.pause(0.05)
    return app.screen


async def _select(pilot, screen: FindingsScreen, rule: str) -> None:
    for _ in range(len(screen.findings)):
        if screen.selected is not None and screen.selected.rule == rule:
            return
        await pilot.press("down")
    assert screen.selected is not None and screen.selected.rule == rule


async def test_i_lists_ranked_findings_with_evidence_and_fix(source) -> None:
    app = create_app(source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        rules = [f.rule for f in app.displayed.findings]
        assert {"gpu-idle", "memcpy-pageable", "preprocess-hot"} <= set(rules)
        assert "i" in app.query_one(FlamePanel).border_subtitle  # the count says where to look
        screen = await _open(pilot, app)
        text = screen_text(app)
        severities = [f.severity for f in screen.findings]
        assert severities == sorted(severities, key=["high", "medium", "low"].index)
        assert "gpu-idle" in text and "memcpy-pageable" in text and "preprocess-hot" in text
        assert screen.selected.rule == rules[0]  # the worst first, selected
        await _select(pilot, screen, "memcpy-pageable")
        await shows(pilot, app, "share_of_gpu_busy")  # evidence with numbers
        text = screen_text(app)
        assert "fix" in text and "pin_memory" in text and "HtoD pageable" in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, FindingsScreen))


async def test_enter_goes_to_the_frame_in_the_flame(source) -> None:
    app = create_app(source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        screen = await _open(pilot, app)
        await _select(pilot, screen, "preprocess-hot")
        where = screen.selected.where[0]  # the hottest preprocess frame
        assert where.startswith("Tokenizer._bpe")
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, FindingsScreen))
        flame = app.query_one(FlameList)
        assert app.view == "python" and flame.display
        assert flame.selected is not None and flame.selected.frame.label() == where


async def test_enter_goes_to_the_op_in_the_ops_table(source) -> None:
    app = create_app(source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        screen = await _open(pilot, app)
        await _select(pilot, screen, "memcpy-pageable")
        await pilot.press("enter")
        table = app.query_one(OpsTable)
        await wait_for(pilot, lambda: table.display)
        assert app.view == "table"
        assert "Pageable" in table.rows[table.cursor].name
        await shows(pilot, app, "Pageable")


async def test_findings_appear_and_clear_as_the_windows_roll(source) -> None:
    app = create_app(source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        screen = await _open(pilot, app)
        assert any(f.rule == "gpu-idle" for f in screen.findings)
        app.action_seek_to(0.0)  # before the first profiler window: no op findings
        await wait_for(pilot, lambda: not any(f.rule == "gpu-idle" for f in screen.findings))
        await shows(pilot, app, "no torch-profiler windows")
        await pilot.press("right")  # the app's keys still work under the findings view
        await wait_for(pilot, lambda: app.displayed.replay.position >= 5)
        app.action_seek_end()
        await wait_for(pilot, lambda: any(f.rule == "gpu-idle" for f in screen.findings))
        assert isinstance(app.screen, FindingsScreen)  # it stayed open and followed along


async def test_help_lists_the_findings_key(source) -> None:
    app = create_app(source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        keys = dict(app.help_rows())
        assert "findings" in keys["i"]


def test_evidence_reads_with_units() -> None:
    lines = evidence_lines(
        {"busy_share": 0.0612, "busy_us": 12_500.0, "copies": {"HtoD pageable": {"count": 3, "bytes": 3 << 20}},
         "gaps_ms": [120.5, 101.0], "top_copies": [{"op": "aten::copy_", "self_us": 80.0}]}  # fmt: skip
    )
    text = "\n".join(lines)
    assert "busy_share: 6.1%" in text and "busy_us: 12.50 ms" in text
    assert "    HtoD pageable:" in text and "bytes: 3.0 MiB" in text
    assert "gaps_ms: 120.5, 101" in text and "op aten::copy_, self_us 80.0 µs" in text


async def test_a_threshold_shows_as_a_percentage_beside_its_share(tmp_path: Path) -> None:
    """The slow-tokenizer recording's preprocess-hot: ``share: 61.6%`` beside ``threshold:
    25.0%``, not ``threshold: 0.25``."""
    rec = data.DATA / "recordings" / "textgen_slow_tokenizer.infertop"
    app = create_app(ReplaySource(read_recording(str(rec)), Config()), title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await _open(pilot, app)
        await shows(pilot, app, "threshold: 25.0%")
        assert "threshold: 0.25" not in screen_text(app)
        assert "share: 61.6%" in screen_text(app)


TRACE = data.TRACES / "a100_sampled_rank0.json.gz"


async def test_an_imported_trace_replays_with_its_ops_and_findings(tmp_path: Path) -> None:
    data.trace(TRACE.name)
    from infertop.record.importer import import_trace

    out = tmp_path / "trace.infertop"
    import_trace(str(TRACE), str(out))
    app = create_app(ReplaySource(read_recording(str(out)), Config()), title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        # no Python samples in a trace: the panel opens on the torch ops instead
        await wait_for(pilot, lambda: app.displayed is not None and app.view == "ops")
        await shows(pilot, app, "aten::_foreach_mul_")  # the widest op: a bar of the icicle
        assert "i: 3 findings" in app.query_one(FlamePanel).border_subtitle
        screen = await _open(pilot, app)
        assert [f.rule for f in screen.findings][0] == "python-overhead"
        await shows(pilot, app, "outside_share: 54.6%")


async def test_the_status_line_counts_findings_even_at_80x24(source) -> None:
    app = create_app(source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        n = len(app.displayed.findings)
        assert n >= 3
        await shows(pilot, app, f"⚑ {n} findings (i)")
