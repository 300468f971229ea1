"""The tail view's and the stage panel's pause rows' text, without an app (``tail_rows.py``,
``widgets/pause_rows.py``), and the per-window pause series they draw (``pause_history``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infertop.analysis.pause_history import pause_history
from infertop.analysis.session import Session
from infertop.analysis.snapshot import build_snapshot
from infertop.analysis.tail import SlowCall, StageTail, TailFrame
from infertop.analysis.tail_view import TailView
from infertop.config import Config
from infertop.model.events import CollectorStatus, GcPause, LoopLag, TargetInfo
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from infertop.tui.tail_rows import (
    default_stage,
    frame_lines,
    no_calls_line,
    no_samples_line,
    overlap_lines,
    slowest_lines,
    stage_order,
    tail_text,
)
from infertop.tui.widgets.stages import render_stages
from tests.support import data

TAIL = data.DATA / "recordings" / "tail_pauses.infertop"


def _tail(stage: str = "preprocess", calls: int = 100, **kw) -> StageTail:
    base = dict(
        stage=stage, threshold_ms=40.0, threshold_given=False, calls=calls, slow_calls=2,
        typical_calls=50, p50_ms=5.0, slow_samples=30, typical_samples=200,
        frames=(TailFrame("rare_slow_path", "/srv/app/pipeline.py", 25, 0.9, 0.0),
                TailFrame("encode", "/srv/app/pipeline.py", 10, 0.5, 0.4)),
        overlaps={"gc": 0.0, "gil": 0.094, "queue": 0.0, "sync": None, "profiler": 0.012},
        slowest=(SlowCall(1000.5, 44.4, 7), SlowCall(1002.25, 41.3, 8)),
    )  # fmt: skip
    base.update(kw)
    return StageTail(**base)  # type: ignore[arg-type]


def _snap(tail_view=None, **kw):
    snap = build_snapshot(Session())
    return replace(snap, ui=replace(snap.ui, tail_view=tail_view), **kw)


def test_the_stage_shown_first_is_the_flame_s_else_the_busiest() -> None:
    tails = [_tail("postprocess", 80), _tail("preprocess", 100), _tail("my-stage", 300)]
    assert stage_order(tails) == ["preprocess", "postprocess", "my-stage"]
    assert default_stage(tails, None) == "my-stage"
    assert default_stage(tails, "postprocess") == "postprocess"
    assert default_stage(tails, "forward") == "my-stage"  # the filter's stage has no calls
    assert default_stage([], None) is None


@pytest.mark.parametrize("width", [60, 76, 146])
def test_frames_come_by_excess_with_both_shares_and_fit_the_width(width: int) -> None:
    lines = [t.plain for t in frame_lines(_tail(), width)]
    assert "slow  typical" in lines[0]
    assert "rare_slow_path" in lines[1] and "90.0%" in lines[1] and "0.0%" in lines[1]
    assert "encode" in lines[2] and "50.0%" in lines[2] and "40.0%" in lines[2]
    assert all(len(line) <= width for line in lines)
    # the shares line up under their headers
    assert lines[1].index("90.0%") + 5 == lines[0].rindex("slow") + 4


def test_no_frames_and_no_samples_are_said() -> None:
    assert "ran the code typical calls run" in frame_lines(_tail(frames=()), 80)[1].plain
    assert "no call samples fell" in frame_lines(_tail(slow_samples=0), 80)[1].plain


def test_the_slowest_calls_start_from_the_session_start_with_their_thread() -> None:
    lines = [t.plain for t in slowest_lines(_tail(), 1000.0, {7: "MainThread"}, 40)]
    assert lines[1].split() == ["at", "0:00.50", "44.4", "ms", "MainThread"]
    assert lines[2].split() == ["at", "0:02.25", "41.3", "ms", "thread", "8"]
    more = slowest_lines(_tail(slow_calls=9), 1000.0, {}, 40, limit=1)
    assert more[-1].plain.strip() == "… 8 more"


def test_overlaps_name_our_own_profiler_and_what_was_not_measured() -> None:
    lines = {t.plain.split("  ")[1].strip(): t.plain for t in overlap_lines(_tail())[1:]}
    assert list(lines) == [
        "garbage collection",
        "GIL held elsewhere",
        "waiting in a queue",
        "host-device syncs",
        "our own profiler windows",
    ]
    assert "9.4%" in lines["GIL held elsewhere"]
    assert "not measured" in lines["host-device syncs"]
    assert "1.2%" in lines["our own profiler windows"]


def test_without_call_samples_one_line_says_why_and_what_to_do() -> None:
    none = TailView(call_samples=0)
    ran = (CollectorStatus(0.0, "agent", "stopped", "detached"),)
    py39 = _snap(target=TargetInfo(pid=1, python="3.9.18"), statuses=ran, tail_view=none)
    line = no_samples_line(py39)
    assert line is not None and "Python 3.9.18" in line and "infertop.stage(" in line
    py311 = _snap(target=TargetInfo(pid=1, python="3.11.7"), statuses=ran, tail_view=none)
    # the agent times --stage rules on every Python it runs on (wrappers before 3.12): the
    # line names the Python and never sends the user to another one
    assert "--stage STAGE=FUNCTION" in (no_samples_line(py311) or "")
    assert "≥" not in (no_samples_line(py39) or "")
    no_agent = CollectorStatus(0.0, "agent", "unavailable", "--no-inject")
    line = no_samples_line(_snap(statuses=(no_agent,), tail_view=none))
    assert line is not None and "agent did not run (--no-inject)" in line
    assert no_samples_line(_snap(tail_view=TailView(call_samples=5))) is None
    assert no_samples_line(_snap()) is None  # not computed yet: nothing to say
    assert no_calls_line(py39).startswith("No timed stage calls, so no tail: the agent's call")
    assert "on Python 3.9.18" in no_calls_line(py39)
    # the view's text: the explanation instead of the frames, the calls and overlaps still
    text = tail_text(py39, _tail(), 100).plain
    assert "No call samples" in text and "rare_slow_path" not in text and "44.4 ms" in text


def test_pause_history_splits_pauses_over_windows_and_keeps_the_worst_lag() -> None:
    windows = [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]
    gc = [
        GcPause(0.9, 1.1, 2, 10, 1),  # across the first two windows
        GcPause(2.5, 2.51, 0, 1, 1, pid=7),  # another process's
        GcPause(5.0, 5.1, 0, 1, 1),  # after the history
    ]
    lags = [LoopLag(0.5, 0.010, 2), LoopLag(0.6, 0.030, 2), LoopLag(2.2, 0.002, 2)]
    got = pause_history(gc, lags, windows)
    assert got is not None
    assert got.gc_ms == pytest.approx((100.0, 100.0, 10.0))
    assert got.lag_ms == pytest.approx((30.0, 0.0, 2.0))
    mine = pause_history(gc, [], windows, keep=lambda pid: pid == 0)
    assert mine is not None and mine.gc_ms == pytest.approx((100.0, 100.0, 0.0))
    assert pause_history([], [], windows) is None
    assert pause_history(gc, lags, []) is None


@pytest.fixture(scope="module")
def recorded():
    if not TAIL.is_file():
        pytest.fail(f"test data missing: {TAIL}")
    return ReplaySource(read_recording(str(TAIL)), Config())


def test_the_recording_s_collections_fall_in_its_history_windows(recorded) -> None:
    snap = build_snapshot(recorded.session, t=recorded.t, view="cpu")
    history = snap.pause_history
    assert history is not None and len(history.gc_ms) == len(snap.history)
    assert sum(history.gc_ms) == pytest.approx(584.709, abs=0.01)  # all 29, whole
    assert max(history.lag_ms) == pytest.approx(76.687, abs=0.01)


@pytest.mark.parametrize("width", [78, 158])
def test_the_stage_panel_has_a_gc_and_a_loop_lag_row(recorded, width: int) -> None:
    snap = build_snapshot(recorded.session, t=recorded.t)
    lines = render_stages(snap, width).plain.splitlines()
    gc = next(line for line in lines if line.startswith("gc "))
    lag = next(line for line in lines if line.startswith("loop lag "))
    assert "29× 585 ms, max 35 ms" in gc
    assert "p99 66 ms, max 77 ms" in lag
    # on the history's axis: the rows end where the stages' sparklines end
    stage = next(line for line in lines if line.startswith("preprocess"))
    spark_end = stage.index("p50") - 2
    assert len(gc.rstrip()) <= spark_end
    assert any(c in gc[spark_end - 12 : spark_end] for c in "▁▂▃▄▅▆▇█")
    assert all(len(line) <= width for line in lines)


def test_no_pause_rows_without_pauses() -> None:
    path = data.DATA / "recordings" / "textgen_service.infertop"
    source = ReplaySource(read_recording(str(path)), Config())
    text = render_stages(build_snapshot(source.session, t=source.t), 120).plain
    assert "gc " not in text and "loop lag" not in text
