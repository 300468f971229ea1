"""--children in the UI: the status line counts the processes followed, and ``w`` shows the
stages and flame of one process at a time, then all merged again."""

from __future__ import annotations

from pathlib import Path

import pytest
from tui_data import screen_text, shows, started, wait_for

from infertop.config import Config
from infertop.model.events import (
    AllocatorReading,
    Frame,
    FrameDef,
    Marker,
    OpPath,
    OpWindow,
    ProcessDef,
    SampleWindow,
    StackDef,
    TargetInfo,
    ThreadDef,
)
from infertop.model.gpu import GpuDeviceReading, GpuReading
from infertop.record.reader import read_recording
from infertop.record.writer import RecordingWriter
from infertop.sources import ReplaySource
from infertop.tui import create_app

T0 = 1_000_000.0


def _tree_recording(path: Path) -> None:
    w = RecordingWriter(str(path))
    w.write([
        TargetInfo(pid=100, cmdline="python router.py", python="3.11.7", started=T0),
        ProcessDef(100, 0, "python router.py"),
        ProcessDef(101, 100, "python -c spawn_main()"),
        ProcessDef(102, 100, "python -c spawn_main()"),
        ThreadDef(100, "MainThread", 100),
        ThreadDef(101, "MainThread", 101),
        ThreadDef(102, "MainThread", 102),
        FrameDef(0, Frame("<module>", "/srv/main.py", 1)),
        FrameDef(1, Frame("route_requests", "/srv/router.py", 10)),
        FrameDef(2, Frame("encode_prompts", "/srv/first_worker.py", 20)),
        FrameDef(3, Frame("decode_tokens", "/srv/second_worker.py", 30)),
        StackDef(0, (0, 1)),
        StackDef(1, (0, 2)),
        StackDef(2, (0, 3)),
    ])  # fmt: skip
    for i in range(5):
        t = T0 + i
        counts = ((100, 0, 10), (101, 1, 60)) + (((102, 2, 50),) if i < 3 else ())
        w.write([SampleWindow(t, t + 1, 100.0, 100, counts, 0, 0.0, 3), GpuReading(t + 0.5, (
            # NVML: "the target's" memory is the session's; the process lists say whose is whose
            GpuDeviceReading(0, "NVIDIA A100", memory_used=5 << 30, memory_total=80 << 30,
                             process_memory=4 << 30, processes=((101, 4 << 30),)),
            GpuDeviceReading(1, "NVIDIA A100", memory_used=8 << 30, memory_total=80 << 30,
                             process_memory=6 << 30, processes=((102, 6 << 30), (9999, 2 << 30))),
        ))])  # fmt: skip
        if i == 2:
            w.write([Marker(t + 1, "process 102 exited", {"pid": "102", "process": "exited"})])
        if i == 1:  # the agents: in the router (the target: pid 0) and in worker 1
            w.write([
                OpWindow(t, t + 0.5, "agent", 10, False, (
                    OpPath(("aten::route_gather",), "other", "cpu", 4, 900.0, 900.0),)),
                OpWindow(t, t + 0.5, "agent", 10, False, (
                    OpPath(("aten::worker_matmul",), "forward", "cpu", 8, 5000.0, 5000.0),),
                    pid=101),
                AllocatorReading(t + 0.5, 0, 1 << 30, 2 << 30, 1 << 30, 0, 0, pid=101),
            ])  # fmt: skip
    w.close()


def _flame_text(app) -> str:  # noqa: ANN001
    return screen_text(app).split("Python flame", 1)[-1]


async def test_w_cycles_merged_and_each_process(tmp_path: Path) -> None:
    path = tmp_path / "tree.infertop"
    _tree_recording(path)
    app = create_app(ReplaySource(read_recording(str(path)), Config()), title="tree")
    async with app.run_test(size=(120, 32)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "3 processes, 1 exited · all merged (w)")
        await shows(pilot, app, "decode_tokens")
        # merged, the router's frame is a tenth of the icicle's width: its name is cut
        assert "route_requ…" in screen_text(app) and "encode_prompts" in screen_text(app)

        await pilot.press("w")
        await shows(pilot, app, "router (pid 100)")
        await wait_for(pilot, lambda: "encode_prompts" not in _flame_text(app))
        assert "route_requests" in _flame_text(app)
        assert app.displayed.samples == 50  # the router's own: 10 a window

        await pilot.press("w")
        await shows(pilot, app, "worker 1 (pid 101)")
        await wait_for(pilot, lambda: "route_requests" not in _flame_text(app))
        assert "encode_prompts" in _flame_text(app) and "decode_tokens" not in _flame_text(app)

        await pilot.press("w")
        await shows(pilot, app, "worker 2 (pid 102), exited")
        await wait_for(pilot, lambda: app.displayed.samples == 150)  # it died after 3 windows

        await pilot.press("w")
        await shows(pilot, app, "3 processes, 1 exited · all merged (w)")
        await wait_for(pilot, lambda: app.displayed.samples == 50 + 300 + 150)


async def test_one_process_session_has_no_process_view(tmp_path: Path) -> None:
    path = tmp_path / "one.infertop"
    w = RecordingWriter(str(path))
    w.write([
        TargetInfo(pid=7, cmdline="python serve.py", started=T0),
        ThreadDef(7, "MainThread"),
        FrameDef(0, Frame("serve", "/srv/serve.py", 3)),
        StackDef(0, (0,)),
        SampleWindow(T0, T0 + 1, 100.0, 100, ((7, 0, 40),), 0, 0.0, 1),
    ])  # fmt: skip
    w.close()
    app = create_app(ReplaySource(read_recording(str(path)), Config()), title="one")
    async with app.run_test(size=(120, 32)) as pilot:
        await started(pilot, app)
        await pilot.press("w")
        await pilot.pause(0.2)
        assert "processes" not in screen_text(app) and app.displayed.process is None
        assert app.displayed.samples == 40


async def test_w_with_one_process_says_why_nothing_happens(tmp_path: Path) -> None:
    """``w`` in a session of one process switched nothing and said nothing: now a notification
    says why, and how to follow several (--children, or several PIDs)."""
    path = tmp_path / "one.infertop"
    w = RecordingWriter(str(path))
    w.write([
        TargetInfo(pid=7, cmdline="python serve.py", started=T0),
        ThreadDef(7, "MainThread"),
        FrameDef(0, Frame("serve", "/srv/serve.py", 3)),
        StackDef(0, (0,)),
        SampleWindow(T0, T0 + 1, 100.0, 100, ((7, 0, 40),), 0, 0.0, 1),
    ])  # fmt: skip
    w.close()
    app = create_app(ReplaySource(read_recording(str(path)), Config()), title="one")
    async with app.run_test(size=(120, 32), notifications=True) as pilot:
        await started(pilot, app)
        await pilot.press("w")
        await shows(pilot, app, "one process")
        await shows(pilot, app, "--children")
        await shows(pilot, app, "several PIDs")
        assert app.process is None and app.displayed.process is None


def _ops(app) -> set[str]:  # noqa: ANN001
    return {r.name for r in app.displayed.torch.ops}


def _gpu_memory(app) -> list[tuple[int, int]]:  # noqa: ANN001
    """(GPU, "this process" bytes) in the GPU panel's order."""
    return [(d.index, d.process_memory) for d in app.displayed.nvml.devices]


@pytest.mark.slow  # in-process, but seconds long: not in make test-fast
async def test_process_selector_lists_every_process_and_shows_the_chosen_one(tmp_path: Path) -> None:
    path = tmp_path / "tree.infertop"
    _tree_recording(path)
    app = create_app(ReplaySource(read_recording(str(path)), Config()), title="tree")
    async with app.run_test(size=(130, 36)) as pilot:
        await started(pilot, app)
        # merged: every process's samples and every agent's ops; the target's allocator, or
        # where it has none (a router without a GPU) the newest of any
        assert _ops(app) == {"aten::route_gather", "aten::worker_matmul"}
        assert app.displayed.torch.allocator is not None and app.displayed.torch.allocator.pid == 101

        await pilot.press("W")
        await shows(pilot, app, "all 3 processes merged")
        text = screen_text(app)
        lines = {p: next(ln for ln in text.splitlines() if f" {p}  " in ln) for p in (100, 101, 102)}
        assert "router" in lines[100] and "worker 1" in lines[101] and "worker 2" in lines[102]
        assert "exited" in lines[102] and "exited" not in lines[101]
        # worker 1: 60 of 100 ticks a window are active → 0.60 cores; its agent sent 1 window
        row = next(r for r in app.displayed.ui.process_rows if r.pid == 101)
        assert abs(row.cpu - 0.6) < 0.01 and row.op_windows == 1
        assert f"{row.cpu:.2f}" in text

        assert _gpu_memory(app) == [(0, 4 << 30), (1, 6 << 30)]  # the session's, on each GPU

        await pilot.press("down", "down", "enter")  # all → router → worker 1
        await shows(pilot, app, "worker 1 (pid 101)")
        await wait_for(pilot, lambda: _ops(app) == {"aten::worker_matmul"})
        assert app.displayed.torch.allocator is not None and app.displayed.torch.allocator.pid == 101
        assert app.displayed.samples == 300
        # the GPU panel's "this process" is worker 1's own memory, its GPU first
        assert _gpu_memory(app) == [(0, 4 << 30), (1, 0)]
        await pilot.press("W")
        await shows(pilot, app, "all 3 processes merged")
        await pilot.press("down", "enter")  # worker 2: the other GPU is its
        await shows(pilot, app, "worker 2 (pid 102)")
        await wait_for(pilot, lambda: _gpu_memory(app) == [(1, 6 << 30), (0, 0)])

        await pilot.press("W")
        await shows(pilot, app, "all 3 processes merged")
        await pilot.press("up", "up", "enter")  # back to the router: its own agent's ops
        await shows(pilot, app, "router (pid 100)")
        await wait_for(pilot, lambda: _ops(app) == {"aten::route_gather"})
        assert app.displayed.torch.allocator is None  # its own agent read none

        await pilot.press("W", "home", "enter")
        await shows(pilot, app, "3 processes, 1 exited · all merged (w)")


async def test_a_straggler_rank_is_a_finding_in_the_replay(tmp_path: Path) -> None:
    """An imported rank directory (real traces, one rank stretched by 1.3: a transformed real
    trace) replays with the straggler among the findings, naming its rank; in the view of one
    rank, the findings are that rank's and say so."""
    from infertop.record.importer import import_trace
    from tests.support.kineto_ranks import rank_dir

    out = tmp_path / "ranks.infertop"
    import_trace(str(rank_dir(tmp_path, "a100_sampled_rank0", [1.0, 1.0, 1.3])), str(out))
    app = create_app(ReplaySource(read_recording(str(out)), Config()), title="ranks")
    async with app.run_test(size=(130, 36)) as pilot:
        await wait_for(pilot, lambda: app.displayed is not None and app.displayed.torch.windows > 0)
        found = {f.rule: f for f in app.displayed.findings}
        assert "straggler" in found and "rank 2" in found["straggler"].title
        slow = found["straggler"].evidence["pid"]
        await pilot.press("i")
        await shows(pilot, app, f"pid {slow} · rank 2 (pid {slow}) is a straggler")
        await pilot.press("escape")

        await pilot.press("W")
        await shows(pilot, app, "all 3 processes merged")
        await pilot.press("down", "enter")  # rank 0
        await wait_for(pilot, lambda: app.displayed.process is not None)
        rank0 = app.displayed.process
        assert all(f.rule != "straggler" for f in app.displayed.findings)  # a merged-view rule
        assert app.displayed.findings and all(f.pid == rank0 for f in app.displayed.findings)
