"""The lower panel's ops views (key o): torch-ops flame and ops table, over real recordings."""

from __future__ import annotations

from pathlib import Path

import pytest
from tui_data import flame_header, screen_text, shows, started, wait_for, write_recording

from infertop.analysis.ops import DEVICE_FILE
from infertop.analysis.snapshot import build_snapshot
from infertop.config import Config
from infertop.model.events import CollectorStatus
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from infertop.tui import create_app
from infertop.tui.widgets.flame import FlameList
from infertop.tui.widgets.flame_panel import FlamePanel
from infertop.tui.widgets.ops import OpsTable, header_line, no_ops_reason, short_name
from infertop.tui.widgets.status import StatusLine

NOT_YET = "not in this release yet: torch ops and kernels are not collected (py-spy only)"


def replay(path: Path) -> ReplaySource:
    return ReplaySource(read_recording(str(path)), Config())


@pytest.fixture
def ops_source(tmp_path: Path) -> ReplaySource:
    return replay(write_recording(tmp_path / "ops.infertop", ops=True))


async def test_o_cycles_python_flame_torch_ops_flame_and_ops_table(ops_source) -> None:
    app = create_app(ops_source, title="t")
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot, app)
        panel, flame, table = app.query_one(FlamePanel), app.query_one(FlameList), app.query_one(OpsTable)
        assert flame_header(app).startswith("Python") and flame.mode == "python"
        await pilot.press("o")
        await shows(pilot, app, "ampere_sgemm_128x64_tn")
        assert flame.mode == "ops" and flame.has_focus and "torch ops" in flame_header(app)
        rows = {tuple(f.function for f in r.node.path()): r.node for r in flame.rows}
        gemm = rows[("aten::linear", "aten::addmm", "ampere_sgemm_128x64_tn")]
        assert gemm.frame.file == DEVICE_FILE and not gemm.children  # a kernel: a leaf
        text = screen_text(app)
        assert "aten::linear" in text and "Model.forward" not in text  # the Python flame is gone
        assert "aten::linear  cpu op" in text  # the detail line: the selected op
        await pilot.press("t")  # the list, with times and devices
        await shows(pilot, app, "ms gpu")
        assert "ms cpu" in screen_text(app) and flame_header(app).startswith("torch ops list")
        await pilot.press("t")
        await pilot.press("o")
        await shows(pilot, app, "calls")
        assert table.display and not flame.display and table.has_focus
        assert "ops table" in flame_header(app) and "6 windows" in flame_header(app)
        text = screen_text(app)
        for column in ("op / kernel", "stage", "calls", "total ms", "self ms", "mean µs"):
            assert column in text
        assert table.rows[0].name == "ampere_sgemm_128x64_tn"  # by self time
        assert [r.self_us for r in table.rows] == sorted((r.self_us for r in table.rows), reverse=True)
        await pilot.press("down", "down")
        assert table.cursor == 2
        await pilot.press("pagedown")
        assert table.cursor > 5
        await pilot.press("pageup")
        assert table.cursor == 2
        await pilot.press("o")
        await shows(pilot, app, "Model.forward")
        assert flame.mode == "python" and flame.display and not table.display
        assert panel.border_title == "flame · session"


async def test_the_stage_filter_applies_to_the_ops_views(ops_source) -> None:
    app = create_app(ops_source, title="t")
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot, app)
        await pilot.press("o")
        await wait_for(pilot, lambda: app.query_one(FlameList).rows)
        for _ in range(4):  # preprocess queue forward sync
            await pilot.press("s")
        await wait_for(pilot, lambda: app.displayed.stage_filter == "sync")
        await shows(pilot, app, "stage: sync")
        flame = app.query_one(FlameList)
        names = {f.function for r in flame.rows for f in r.node.path()}
        assert names == {"aten::item", "aten::_local_scalar_dense", "Memcpy DtoH (Device -> Pageable)"}
        assert all(set(r.node.stages) == {"sync"} for r in flame.rows)
        await pilot.press("o")
        await shows(pilot, app, "aten::_local_scalar_dense")
        table = app.query_one(OpsTable)
        assert {r.stage for r in table.rows} == {"sync"} and len(table.rows) == 3
        assert "aten::addmm" not in screen_text(app)


async def test_the_ops_views_say_why_they_are_empty(tmp_path: Path) -> None:
    plain = replay(write_recording(tmp_path / "plain.infertop", windows=5))
    app = create_app(plain, title="t")
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot, app)
        await pilot.press("o")
        await shows(pilot, app, "no torch-profiler windows yet")
        await pilot.press("enter", "escape", "down", "s")  # nothing breaks on no data
        await pilot.press("o")
        await shows(pilot, app, "no torch-profiler windows yet")

    agent = CollectorStatus(1_700_000_000.0, "agent", "unavailable", NOT_YET)
    off = replay(write_recording(tmp_path / "off.infertop", windows=5, agent=agent))
    app = create_app(off, title="t")
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot, app)
        await pilot.press("o")
        await shows(pilot, app, "agent: not in this release yet")
        await pilot.press("o")
        await shows(pilot, app, "agent: not in this release yet")


async def test_help_footer_and_status_line_know_about_ops(ops_source) -> None:
    app = create_app(ops_source, title="t")
    async with app.run_test(size=(120, 30)) as pilot:
        await started(pilot, app)
        keys = dict(app.help_rows())
        assert "torch-ops flame" in keys["o"]
        await wait_for(pilot, lambda: "o Ops" in screen_text(app))
        await wait_for(pilot, lambda: "agent: running · 6 win" in screen_text(app))
        wide = app.query_one(StatusLine)._second_row(app.displayed, 300).plain
        assert "agent: running torch.profiler 0.5 s every 10 s · 6 op windows" in wide


# -- pieces ------------------------------------------------------------------------------------
def test_short_names_keep_what_identifies_a_kernel() -> None:
    long = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
    assert short_name("aten::mm", 20) == "aten::mm"
    assert short_name(long, 60) == "at::native::vectorized_layer_norm_kernel<…>"
    assert short_name(long, 20) == "…ayer_norm_kernel<…>"  # the end names the kernel
    assert len(header_line(90, True)) == 90


def test_no_ops_reason_prefers_the_agent_status(ops_source, tmp_path: Path) -> None:
    snap = build_snapshot(ops_source.session)
    assert snap.torch.windows == 6 and no_ops_reason(snap) is None
    plain = replay(write_recording(tmp_path / "p.infertop", windows=3))
    snap = build_snapshot(plain.session)
    assert no_ops_reason(snap) == "no torch-profiler windows yet"
    plain.session.apply(CollectorStatus(1.0, "agent", "unavailable", "off (--no-inject)"))
    assert no_ops_reason(build_snapshot(plain.session)) == "agent: off (--no-inject)"
    plain.session.apply(CollectorStatus(2.0, "agent", "running", "torch.profiler 0.5 s every 10 s"))
    assert no_ops_reason(build_snapshot(plain.session)) == (
        "no torch-profiler windows yet (agent: torch.profiler 0.5 s every 10 s)"
    )


def test_stages_only_the_ops_have_can_be_filtered(tmp_path: Path) -> None:
    from infertop.model.events import OpPath, OpWindow

    source = replay(write_recording(tmp_path / "p.infertop", windows=3))
    rerank = OpPath(("aten::bmm",), "rerank", "cpu", 4, 80.0, 80.0)
    source.session.apply(OpWindow(1_700_000_001.0, 1_700_000_001.5, "agent", 9, False, (rerank,)))
    app = create_app(source, title="t")
    app.latest = build_snapshot(source.session)
    options = app.stage_options()
    assert options[0] is None and options[-1] == "rerank"
    assert options[1:-1] == [s.name for s in app.latest.totals if s.name != "idle"]
