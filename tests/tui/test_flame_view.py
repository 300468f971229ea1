"""The flame panel's icicle graph with Pilot: the keys, zoom, the mouse, the list style,
live refreshes and search, over a recorded serving loop and over hand-built trees."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from flame_trees import frame, loop_tree, node, tree
from textual.app import App, ComposeResult
from tui_data import flame_header, screen_text, shows, started, write_stacks_recording

import infertop.tui.app as tui_app
from infertop.analysis.flame import FlameNode
from infertop.analysis.session import Session
from infertop.analysis.snapshot import Snapshot, build_snapshot
from infertop.config import Config
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from infertop.tui import create_app, flame_search
from infertop.tui.widgets.flame import FlameList
from infertop.tui.widgets.flame_panel import FlamePanel


@pytest.fixture
def loop_source(tmp_path: Path) -> ReplaySource:
    return ReplaySource(
        read_recording(str(write_stacks_recording(tmp_path / "loop.infertop"))), Config()
    )


def function(flame: FlameList) -> str:
    assert flame.selected is not None and flame.selected.frame is not None
    return flame.selected.frame.function


def detail(app: App) -> str:
    return str(app.query_one("#flame-detail").render())


# -- the app over a recorded serving loop ----------------------------------------------------
async def test_the_three_siblings_of_a_serving_loop_all_show_at_120x40(loop_source) -> None:
    app = create_app(loop_source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "Tokenizer.encode_batch 26.0%")
        row = next(ln for ln in screen_text(app).splitlines() if "Model.forward" in ln)
        for text in (
            "Model.forward 47.0%",
            "Server.write_response 24.0%",
            "Tokenizer.encode_batch 26.0%",
        ):
            assert text in row  # side by side on one row, in name order
        assert row.index("Model.forward") < row.index("Server.write") < row.index("Tokenizer")
        assert flame_header(app).startswith("Python icicle")
        # and at 80x24 too, with the names cut to their bars
        await pilot.resize_terminal(80, 24)
        await shows(pilot, app, "encode_batch 26.0%")
        row = next(ln for ln in screen_text(app).splitlines() if "Model.forward" in ln)
        assert "write_response" in row and "encode_batch" in row


async def test_keys_go_to_the_caller_a_callee_and_along_the_row(loop_source) -> None:
    app = create_app(loop_source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        flame = app.query_one(FlameList)
        assert flame.has_focus and function(flame) == "<module>"
        await pilot.press("down", "down", "down")  # the widest callee each time
        assert function(flame) == "Model.forward"
        await shows(
            pilot, app, "Model.forward  /srv/app/model.py:74 · total 47.0%, self 0.0% · forward"
        )
        await pilot.press("right")
        assert function(flame) == "Server.log_metrics"
        await pilot.press("right", "down")
        assert function(flame) == "dumps"
        await pilot.press("up", "up")
        assert function(flame) == "Server.loop"
        await pilot.press("down", "down")  # back down the way it came, not to the widest
        assert function(flame) == "dumps"
        await pilot.press("left")  # the neighbour on the row, under another caller
        assert function(flame) == "Linear.forward"
        await pilot.press("left", "up", "up", "up", "up", "up")  # stops at the edges
        assert function(flame) == "<module>"
        assert app.displayed.replay.position == 10.0  # ← and → did not seek


async def test_enter_zooms_escape_and_backspace_go_back(loop_source) -> None:
    app = create_app(loop_source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        flame = app.query_one(FlameList)
        await pilot.press("down", "down", "down", "right", "right", "enter")
        assert function(flame) == "Server.write_response"
        assert [s.node.frame.function for s in flame.graph.rows[0]] == ["Server.write_response"]
        assert flame.graph.rows[0][0].width == flame.graph.width  # the whole row
        await shows(pilot, app, "JSONEncoder.encode 24.0%")
        assert flame_header(app).endswith("Server.loop › Server.write_response (24.0%)")
        await pilot.press("down")
        await shows(pilot, app, "dumps  /usr/lib/python3.11/json/__init__.py:231 · total 24.0%")
        assert "in zoom 100.0%, 0.0%" in detail(app)
        await pilot.press("enter", "escape")
        assert flame.zoom[-1].function == "Server.write_response" and function(flame) == "dumps"
        await pilot.press("backspace")
        assert flame.zoom[-1].function == "Server.loop"
        assert function(flame) == "Server.write_response"  # where it was zoomed from
        await pilot.press("escape", "escape", "escape", "escape")
        assert flame.zoom == [] and flame_header(app).endswith("path: all")


async def test_a_click_selects_a_frame_and_a_second_click_zooms(loop_source) -> None:
    app = create_app(loop_source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        flame = app.query_one(FlameList)
        span = next(
            s for s in flame.graph.rows[3] if s.node.frame.function == "Tokenizer.encode_batch"
        )
        await pilot.click(FlameList, offset=(span.x + 2, 3))
        assert function(flame) == "Tokenizer.encode_batch" and not flame.zoom
        await pilot.click(FlameList, offset=(span.x + 2, 3))
        assert flame.zoom[-1].function == "Tokenizer.encode_batch"
        await pilot.click(FlameList, offset=(1, 1))  # the callee under the zoomed frame
        assert function(flame) == "Tokenizer.encode"


async def test_t_switches_to_the_list_and_back_in_the_same_place(loop_source) -> None:
    app = create_app(loop_source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        flame = app.query_one(FlameList)
        await pilot.press("down", "down", "down", "enter", "down")
        assert function(flame) == "Linear.forward" and flame.zoom[-1].function == "Model.forward"
        await pilot.press("t")
        assert flame.style == "list" and flame_header(app).startswith("Python list")
        assert (
            function(flame) == "Linear.forward" and flame.rows[flame.cursor].node is flame.selected
        )
        await shows(pilot, app, "·Linear.forward")  # the list's indented row
        await pilot.press("up", "left")  # the row above (the zoomed frame), then its caller: none
        assert function(flame) == "Model.forward"
        await pilot.press("right")  # its widest callee
        assert function(flame) == "Linear.forward"
        await pilot.press("up", "t")
        assert flame.style == "icicle" and function(flame) == "Model.forward"
        assert flame.zoom[-1].function == "Model.forward"
        assert "t" in dict(app.help_rows()) and "icicle graph" in dict(app.help_rows())["t"]


# -- the panel fed hand-built snapshots --------------------------------------------------------
class FlameHost(App[None]):
    """The flame panel alone, shown whatever snapshot a test gives it."""

    CSS_PATH = str(Path(tui_app.__file__).with_name("infertop.tcss"))

    def compose(self) -> ComposeResult:
        yield FlamePanel(id="flame")

    def on_mount(self) -> None:
        self.query_one(FlameList).focus()

    def feed(self, root: FlameNode) -> None:
        self.query_one(FlamePanel).show(snapshot_of(root))


def snapshot_of(root: FlameNode) -> Snapshot:
    return replace(build_snapshot(Session()), flame=root, samples=root.total)


async def test_the_selection_and_the_zoom_survive_a_snapshot_with_reordered_counts() -> None:
    app = FlameHost()
    async with app.run_test(size=(100, 20)) as pilot:
        app.feed(loop_tree(26, 47, 24))
        await pilot.pause()
        flame = app.query_one(FlameList)
        await pilot.press("down", "enter", "down", "right", "right", "right", "down")
        assert function(flame) == "Tokenizer.encode" and flame.zoom == [
            frame("main"),
            frame("loop"),
        ]
        before = [(s.node.frame, s.x) for s in flame.graph.rows[1]]
        app.feed(loop_tree(60, 10, 27))  # the sizes change order: the bars do not
        await pilot.pause()
        assert function(flame) == "Tokenizer.encode" and flame.selected is node(
            flame.root, "main;loop;tokenize;Tokenizer.encode"
        )
        assert [s.node.frame for s in flame.graph.rows[1]] == [f for f, _ in before]
        assert flame.zoom == [frame("main"), frame("loop")]
        assert "Tokenizer.encode" in detail(app) and "total 60.0%" in detail(app)
        # the frame goes: its nearest caller still drawn is selected, and comes back with it
        app.feed(
            tree([("main;loop;tokenize", 20, "preprocess"), ("main;loop;forward", 80, "forward")])
        )
        await pilot.pause()
        assert function(flame) == "tokenize"
        app.feed(loop_tree())
        await pilot.pause()
        assert function(flame) == "Tokenizer.encode"
        # the zoomed frame goes: back to the root
        app.feed(tree([("other;x", 5, "queue")]))
        await pilot.pause()
        assert flame.zoom == [] and function(flame) == "other"


@pytest.mark.slow  # in-process, but seconds long: not in make test-fast
async def test_a_deep_stack_scrolls_to_keep_the_selection_in_view() -> None:
    app = FlameHost()
    async with app.run_test(size=(80, 12)) as pilot:
        app.feed(tree([(";".join(f"f{i}" for i in range(40)), 10, "forward")]))
        await pilot.pause()
        flame = app.query_one(FlameList)
        height = flame.scrollable_content_region.height
        assert flame.graph.depth == 40 and height < 12
        await pilot.press(*["down"] * 30)
        assert function(flame) == "f30"
        top = int(flame.scroll_offset.y)
        assert top <= 30 < top + height
        await pilot.press("pageup")
        assert function(flame) == f"f{30 - (height - 1)}"
        await pilot.press(*["up"] * 40)
        assert function(flame) == "f0" and flame.scroll_offset.y == 0


async def test_search_highlights_the_matches_and_gives_their_share_once_per_stack() -> None:
    root = tree(
        [
            ("main;encode_batch;encode", 20, "preprocess"),
            ("main;encode_batch", 6, "preprocess"),
            ("main;decode;encode", 4, "postprocess"),
            ("main;forward", 70, "forward"),
        ]
    )
    app = FlameHost()
    async with app.run_test(size=(100, 20)) as pilot:
        app.feed(root)
        await pilot.pause()
        panel, flame = app.query_one(FlamePanel), app.query_one(FlameList)
        await pilot.press("slash")
        assert panel.search_input.has_focus and not panel.detail.display
        await pilot.press(*"encode*")
        assert flame.found is not None and flame.found.total == 30  # 26 + 4: not 20 twice
        assert panel.header_text(100).endswith("·  /encode*: 30.0 %")
        await pilot.press("enter")  # keeps the highlight
        assert flame.has_focus and panel.detail.display and flame.pattern == "encode*"
        styles = {}
        for y in range(flame.graph.depth):
            for seg in flame.render_line(y):
                if seg.text.strip():
                    styles[seg.text.split()[0]] = seg.style
        assert styles["encode_batch"].underline and styles["encode"].underline
        assert not styles["forward"].underline and styles["forward"].bgcolor.name == "#303030"
        app.feed(tree([("main;encode_batch", 10, "preprocess"), ("main;forward", 30, "forward")]))
        await pilot.pause()  # a new snapshot: the search goes on, over it
        assert panel.header_text(100).endswith("/encode*: 25.0 %")
        await pilot.press("t")  # the list highlights the rows too
        lines = {r.node.frame.function: i for i, r in enumerate(flame.rows)}
        for name, hit in (("encode_batch", True), ("forward", False)):
            segments = [seg for seg in flame.render_line(lines[name]) if seg.text == name]
            assert segments and bool(segments[0].style.underline) is hit
        await pilot.press("escape")  # esc clears the search (and zooms out only after)
        assert flame.found is None and "encode*" not in panel.header_text(100)
        await pilot.press("slash", *"zzz", "escape")
        assert flame.found is None and flame.has_focus and panel.detail.display


async def test_a_search_too_big_to_count_at_once_is_counted_on_a_thread(monkeypatch) -> None:
    monkeypatch.setattr(flame_search, "SYNC_NODES", 2)
    app = FlameHost()
    async with app.run_test(size=(100, 20)) as pilot:
        app.feed(loop_tree())
        await pilot.pause()
        panel = app.query_one(FlamePanel)
        await pilot.press("slash", *"tokeniz*", "enter")
        await shows(pilot, app, "/tokeniz*: 26.0 %")  # the header follows when it is counted
        assert panel.flame_list.found.done
