"""The pieces under the app: render helpers, flame rows, and the ingest worker on its own."""

from __future__ import annotations

import time

from rich.text import Text

from infertop.analysis.snapshot import build_snapshot
from infertop.config import STAGES
from infertop.model.events import Frame, StageSpan
from infertop.sources import ReplaySource
from infertop.tui.ingest import IngestWorker, ScaleSpeed, SeekTo, SetStageFilter, TogglePlay
from infertop.tui.messages import SnapshotReady
from infertop.tui.palette import STAGE_COLORS, bar, clock, human_bytes, sparkline, stage_color
from infertop.tui.widgets.flame import MIN_SHARE, breadcrumb, flame_rows
from infertop.tui.widgets.stages import render_stages, stage_history
from infertop.tui.widgets.status import fit, short_cmdline
from infertop.tui.widgets.timeline import render_timeline, speed_text


def test_every_stage_has_a_fixed_colour_and_user_stages_a_stable_one() -> None:
    assert set(STAGES) <= set(STAGE_COLORS)
    assert len(set(STAGE_COLORS.values())) == len(STAGE_COLORS)
    assert stage_color("retrieval") == stage_color("retrieval") != ""


def test_bar_sparkline_and_formats() -> None:
    assert bar(0.5, 10) == ("█████", " " * 5)
    filled, empty = bar(0.0625, 4)  # two eighths of one cell
    assert filled == "▎" and len(filled + empty) == 4
    assert bar(1.5, 3) == ("███", "")
    assert sparkline([0.0, 0.5, 1.0], 5) == "   ▅█"
    assert clock(59.96) == "1:00.0" and clock(5) == "0:05.0" and clock(3725) == "1:02:05"
    assert human_bytes(512) == "512 B" and human_bytes(3 * 1024 * 1024) == "3.0 MB"
    assert speed_text(2) == "2×" and speed_text(0.5) == "1/2×"


def test_breadcrumb_keeps_the_innermost_frames() -> None:
    path = [Frame(f"function_{i}", "/x.py", i) for i in range(10)]
    assert breadcrumb([], 40) == "all"
    assert breadcrumb(path[:2], 80) == "all › function_0 › function_1"
    short = breadcrumb(path, 40)
    assert len(short) <= 40 and short.startswith("all › … ›") and short.endswith("function_9")


def test_flame_rows_are_depth_first_biggest_first_and_skip_tiny_frames(
    replay_source: ReplaySource,
) -> None:
    snap = build_snapshot(replay_source.session, t=replay_source.t)
    rows = flame_rows(snap.flame, zoomed=False)
    assert rows[0].depth == 0 and rows[0].node.frame.function == "<module>"
    for a, b in zip(rows, rows[1:], strict=False):
        assert b.depth <= a.depth + 1
        if b.depth == a.depth + 1:
            assert b.node.parent is a.node
    assert all(r.node.total >= snap.flame.total * MIN_SHARE for r in rows)
    forward = snap.flame.find(rows[4].node.path())
    assert forward is rows[4].node
    zoomed = flame_rows(forward, zoomed=True)
    assert zoomed[0].node is forward and zoomed[0].depth == 0
    assert {r.node.frame.function for r in zoomed[1:]} >= {"Block.forward", "Linear.forward"}


def test_stage_panel_text(replay_source: ReplaySource) -> None:
    assert "waiting for samples" in render_stages(None, 80).plain
    snap = build_snapshot(replay_source.session, t=replay_source.t)
    text = render_stages(snap, 78).plain
    lines = text.splitlines()
    assert lines[0].startswith("stage") and "history" in lines[0]
    names = [s.name for s in snap.recent]
    assert [ln.split()[0] for ln in lines[1 : 1 + len(names)]] == names
    # then the stages seen without a timed call, why, and what to do (wrapped to fit)
    assert lines[1 + len(names)].startswith("latency") and "no timed calls" in text
    assert all(len(ln) <= 78 for ln in lines)
    forward = next(ln for ln in lines if ln.startswith("forward"))
    assert "p50" in forward and "/s" in forward
    values = stage_history(snap.history, "forward")
    assert len(values) == len(snap.history) and all(0 < v < 1 for v in values)
    idle = stage_history(snap.history, "idle")
    assert all(0 < v < 1 for v in idle)


def test_the_stage_panel_has_a_requests_row_with_each_stage_s_share_of_a_request(
    replay_source: ReplaySource,
) -> None:
    session = replay_source.session
    t_end = session.t_last
    snap = build_snapshot(session, t=t_end)
    assert "requests" not in render_stages(snap, 120).plain  # none seen: no row
    api, worker = 9001, 9002  # an API process's loop thread and a worker's thread
    session.thread_pid.update({api: api, worker: worker})
    for i in range(40):  # the last 4 s: 10 requests a second, 30 ms each, 20 of them forward
        a = t_end - 4.0 + i * 0.1
        session.apply(StageSpan(worker, "forward", a + 0.005, a + 0.025))
        session.apply(StageSpan(api, "request", a, a + 0.030, request=f"POST /predict #{i + 1}"))
    snap = build_snapshot(session, t=t_end)
    row = next(ln for ln in render_stages(snap, 120).plain.splitlines() if ln.startswith("requests"))
    # 40 requests over the panel's last 5 s: 8.0/s; joined by time: 20 ms forward, 10 ms the hop
    assert "8.0/s  p50 30.0  p95 30.0  p99 30.0 ms" in row, row
    assert "forward 20.0" in row and "ipc 10.0" in row, row


def test_status_helpers() -> None:
    cmd = "/opt/venv/bin/python /srv/app/serve.py --model llama-7b --port 8000"
    assert short_cmdline(cmd, 80) == "python serve.py --model llama-7b --port 8000"
    assert short_cmdline(cmd, 20) == "python serve.py --m…"
    assert short_cmdline(None) == "?"
    parts = [(0, Text("keep me"), Text("keep")), (2, Text("drop me first"), Text("drop")),
             (1, Text("shorten"), Text("sh"))]  # fmt: skip
    assert fit(parts, 100).plain == "keep me │ drop me first │ shorten"
    assert fit(parts, 24).plain == "keep me │ drop │ shorten"
    assert fit(parts, 14).plain == "keep me │ sh"


def test_timeline_text() -> None:
    from infertop.analysis.snapshot import ReplayState

    text = render_timeline(ReplayState(15.0, 60.0, True, 2.0), 60).plain
    assert "playing" in text and "2×" in text and text.endswith("0:15.0 / 1:00.0")
    assert len(text) <= 60
    assert "paused" in render_timeline(ReplayState(0.0, 0.0, False, 1.0), 60).plain


def test_ingest_worker_coalesces_and_applies_commands(replay_source: ReplaySource) -> None:
    posted: list[object] = []
    worker = IngestWorker(replay_source, posted.append, interval=0.05)
    worker.start()
    try:
        deadline = time.monotonic() + 5
        while not posted and time.monotonic() < deadline:
            time.sleep(0.01)
        # commands while nobody takes: snapshots are replaced, one SnapshotReady is pending
        worker.send(SeekTo(10.0))
        worker.send(SetStageFilter("forward"))
        worker.send(ScaleSpeed(2.0))
        time.sleep(0.3)
        assert sum(isinstance(m, SnapshotReady) for m in posted) == 1
        snap = worker.take()
        assert snap is not None and snap.replay is not None
        assert snap.replay.position == 10.0 and snap.replay.speed == 2.0
        assert snap.stage_filter == "forward" and set(snap.flame.stages) == {"forward"}
        worker.send(TogglePlay())
        while sum(isinstance(m, SnapshotReady) for m in posted) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sum(isinstance(m, SnapshotReady) for m in posted) == 2
        time.sleep(0.3)
        later = worker.take()
        assert later is not None and later.replay.playing and later.replay.position > 10.0
    finally:
        worker.stop()
    assert not worker.alive and worker.final is not None


def test_the_detail_line_says_where_and_how_much_and_fits_its_width() -> None:
    from flame_trees import loop_tree, node

    from infertop.tui.widgets.flame_rows import frame_detail

    root = loop_tree()
    enc = node(root, "main;loop;tokenize;Tokenizer.encode")
    assert frame_detail(enc, root, None, False, 120).plain == (
        "Tokenizer.encode  /srv/app/tokenizer.py:10 · total 26.0%, self 26.0% · preprocess"
    )
    zoom = node(root, "main;loop;tokenize")
    assert "· in zoom 100.0%, 100.0% ·" in frame_detail(enc, root, zoom, False, 120).plain
    narrow = frame_detail(enc, root, zoom, False, 50).plain
    assert narrow == "Tokenizer.e…  total 26.0%, self 26.0% · preprocess"
    assert frame_detail(None, root, None, False, 50).plain == ""


def test_the_stage_panel_shows_an_engine_s_steps_and_scheduler_as_the_report_does() -> None:
    """vLLM among the processes: its steps and their time on one row, the scheduler's state as
    its own metrics saw it on the next, a full KV cache and preemptions in red (as the
    kv-cache-headroom finding judges them); without the scheduler's metrics, the requests a
    step gave an output."""
    from dataclasses import replace

    from infertop.analysis.engine import EngineSummary, SchedulerSummary
    from infertop.tui.widgets.engine_rows import engine_rows

    sc = SchedulerSummary(400, (2.0, 3), (0.0, 2), (0.33, 1.0), 28, 4100, 60500, 0, 0, seconds=100.0)
    e = EngineSummary("vllm", 4200, 42.0, (2.1, 6.4, 2.5), (2.0, 3), (("forward", 80), ("schedule", 20)),
                      (("forward", 30), ("prepare", 70)), sc, 100.0)  # fmt: skip
    head, sched = (r.plain for r in engine_rows(e, 12))
    assert head.startswith("engine (vllm)") and "42 steps/s" in head and "step p50 2.1 p99 6.4 ms" in head
    assert "worker 70% outside the forward" in head
    assert "running 2 (max 3)  waiting 0 (max 2)" in sched and "KV 33% (max 100%)" in sched
    assert "28 preempted" in sched and "41 prompt + 605 generated tok/s" in sched
    red = [sched[s.start : s.end] for s in engine_rows(e, 12)[1].spans if "red" in str(s.style)]
    assert red == ["KV 33% (max 100%)", "  28 preempted"], red
    _, batch = (r.plain for r in engine_rows(replace(e, scheduler=None), 12))
    assert "requests a step p50 2 (max 3)" in batch
    assert engine_rows(None, 12) == []
