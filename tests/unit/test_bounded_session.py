"""A live session is bounded: past its horizon, windows, spans and op windows are folded into
summaries, so what it holds stops growing while every view still shows the whole session."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from infertop.analysis.session import Session
from infertop.analysis.snapshot import SnapshotCaches, build_snapshot
from infertop.model.events import StageSpan
from tests.collect.ops_data import make_allocator, make_op_window
from tests.tui.tui_data import MAIN_TID, TARGET, make_window

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tui"))
from gpu_data import gpu_readings

from infertop.analysis.findings.live import with_findings
from infertop.analysis.gpu_series import nvml_busy

T0 = TARGET.started


def feed(sessions: list[Session], seconds: int, seed: int = 11, after=None, gpu=False) -> None:
    """The TUI tests' batching server at real rates: a 1 s py-spy window, 40 forward spans and
    an allocator reading a second, a torch-profiler window every 10 s; ``gpu``: two NVML
    readings a second of two H100s (the target's stalls for 4 s at 40 s)."""
    rng = random.Random(seed)
    readings = gpu_readings(T0, seconds) if gpu else []
    for s in sessions:
        s.apply(TARGET)
    for i in range(seconds):
        raw = make_window(rng, T0 + i, 1.0, phase=(i % 300) / 300)
        events = list(sessions[0].intern(raw))
        for s in sessions[1:]:
            assert list(s.intern(raw)) == events  # same interning: same ids
        for k in range(40):
            start = T0 + i + k * 0.025
            events.append(StageSpan(MAIN_TID, "forward", start, start + rng.lognormvariate(-3.5, 0.5)))
            if k % 4 == 0:
                events.append(StageSpan(MAIN_TID, "preprocess", start, start + rng.expovariate(200)))
        events.append(make_allocator(T0 + i + 0.5, i))
        if i % 10 == 1:
            events.append(make_op_window(rng, T0 + i + 0.2))
        events += readings[2 * i : 2 * i + 2]
        for s in sessions:
            for ev in events:
                s.apply(ev)
        if after is not None:
            after(i)


def tree(node) -> list:
    """A flame tree as plain data, to compare two."""
    out = [(node.frame, node.total, node.self_count, dict(node.stages))]
    for child in node.children.values():
        out.append(tree(child))
    return out


def test_retained_detail_stops_growing_while_the_totals_cover_everything() -> None:
    bounded = Session(retain_s=60.0)
    held: list[tuple[int, int, int]] = []
    feed([bounded], 600, after=lambda i: held.append(
        (len(bounded.windows), len(bounded.spans), len(bounded.op_windows))))  # fmt: skip
    # what is kept is the last minute or so (a tenth more before each fold), never more
    assert max(h[0] for h in held[200:]) == max(h[0] for h in held[100:200]) <= 67
    assert max(h[1] for h in held[200:]) <= 67 * 50
    assert max(h[2] for h in held[200:]) <= 7
    assert len(bounded.allocator) <= 68
    # ... while the whole session is still counted
    snap = build_snapshot(bounded)
    assert bounded.window_count == 600
    assert snap.torch.windows == 60
    calls = {s.name: s.calls for s in snap.totals if s.calls}
    assert calls == {"forward": 600 * 40, "preprocess": 600 * 10}
    assert snap.duration_s == pytest.approx(600.0)


def test_a_bounded_session_shows_what_an_unbounded_one_shows() -> None:
    bounded, full = Session(retain_s=45.0), Session()
    caches = {id(bounded): SnapshotCaches(), id(full): SnapshotCaches()}
    snaps: dict[int, list] = {id(bounded): [], id(full): []}

    def snapshot(i: int) -> None:
        if i % 97 == 0 or i == 299:  # live: the ingest worker's accumulators carry on
            for s in (bounded, full):
                snaps[id(s)].append(build_snapshot(s, caches=caches[id(s)]))

    feed([bounded, full], 300, after=snapshot, gpu=True)
    assert bounded.windows_folded > 200 and full.windows_folded == 0
    assert bounded.gpu_fold.n > 400 and len(bounded.gpu) < 110
    for b, f in zip(snaps[id(bounded)], snaps[id(full)]):
        assert (b.samples, b.errors, b.t_first, b.coverage) == (f.samples, f.errors, f.t_first, f.coverage)
        assert [(s.name, s.samples, s.share, s.calls) for s in b.totals] == [
            (s.name, s.samples, s.share, s.calls) for s in f.totals
        ]
        for bs, fs in zip(b.totals, f.totals):  # folded spans: percentiles from 1 % bins
            if fs.latency_ms is not None:
                for q in ("p50", "p95", "p99"):
                    assert getattr(bs.latency_ms, q) == pytest.approx(getattr(fs.latency_ms, q), rel=0.006)
        assert b.recent == f.recent and b.history[-40:] == f.history[-40:]  # 45 s kept here
        assert b.top == f.top and tree(b.flame) == tree(f.flame)
        assert b.torch.ops == f.torch.ops and tree(b.torch.device_flame) == tree(f.torch.device_flame) and b.torch.gpu == f.torch.gpu and b.torch.op_time == f.torch.op_time
        assert b.torch.allocator == f.torch.allocator
        for mb, mf in zip(b.nvml.session_means, f.nvml.session_means, strict=True):
            assert mb == pytest.approx(mf)
        assert b.nvml.devices == f.nvml.devices
        for sb, sf in zip(b.nvml.series, f.nvml.series, strict=True):  # the history's last 40 s
            assert {m: v[-40:] for m, v in sb.values.items()} == {m: v[-40:] for m, v in sf.values.items()}
        busy_b = nvml_busy(b.nvml.readings, b.nvml.working, b.nvml.fold)
        busy_f = nvml_busy(f.nvml.readings, f.nvml.working)
        assert busy_b.readings == busy_f.readings and busy_b.devices == busy_f.devices
        assert busy_b.busy_share == pytest.approx(busy_f.busy_share)
        assert busy_b.seconds == pytest.approx(busy_f.seconds, rel=0.01)
        assert busy_b.gaps_s == pytest.approx(busy_f.gaps_s, rel=0.05)  # the stall at 40 s
        assert with_findings(b).findings == with_findings(f).findings
    # a fresh accumulator (a new view) reads the folded totals too
    assert build_snapshot(bounded).top == build_snapshot(full).top
    assert build_snapshot(bounded).torch.ops == build_snapshot(full).torch.ops


def test_replay_sessions_keep_everything() -> None:
    s = Session()
    feed([s], 120)
    assert s.windows_folded == 0 and len(s.windows) == 120 and s.op_windows_folded == 0


def test_the_process_selector_counts_every_agent_window_of_a_bounded_session() -> None:
    """The selector's per-process count of agent windows covers the whole session, not only
    the windows a bounded live session still keeps in full."""
    from infertop.analysis.processes.table import process_rows
    from infertop.model.events import OpWindow, ProcessDef, TargetInfo

    s = Session(retain_s=10.0)
    s.apply(TargetInfo(pid=100, started=T0))
    s.apply(ProcessDef(100, 0, "python router.py"))
    s.apply(ProcessDef(101, 100, "python -c spawn_main()"))
    for i in range(60):  # a window a second from each process's agent, for a minute
        s.apply(OpWindow(T0 + i, T0 + i + 0.25, "agent", 10, False))
        s.apply(OpWindow(T0 + i, T0 + i + 0.25, "agent", 10, False, pid=101))
    assert len(s.op_windows) < 40  # most were folded
    rows = {r.pid: r for r in process_rows(s, ((100, "router"), (101, "worker 1")))}
    assert rows[100].op_windows == 60 and rows[101].op_windows == 60
