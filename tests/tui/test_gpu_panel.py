"""The GPU panel over replays and live sessions: memory, utilisation lined up with the stages,
several GPUs (key g), and one plain line when there is no NVML or no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_data import STALL, write_gpu_recording
from tui_data import (
    TARGET,
    ScriptedCollector,
    screen_text,
    shows,
    started,
    wait_for,
    write_recording,
)

from infertop.collect.nvml import NvmlCollector
from infertop.config import Config
from infertop.model.gpu import GpuReading
from infertop.record.reader import read_recording
from infertop.sources import LiveSource, ReplaySource
from infertop.tui import create_app
from infertop.tui.widgets.gpu import GpuPanel
from infertop.tui.widgets.stages import StagePanel, stage_columns
from tests.support.fake_nvml import FakeNvml


def replay(path: Path) -> ReplaySource:
    return ReplaySource(read_recording(str(path)), Config())


@pytest.fixture
def gpu_source(tmp_path: Path) -> ReplaySource:
    return replay(write_gpu_recording(tmp_path / "gpu.infertop"))


def _row(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if line.lstrip("│ ").startswith(label))


async def test_replay_shows_memory_and_a_stall_under_its_second(gpu_source) -> None:
    app = create_app(gpu_source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "this process 54.7 GB")
        text = screen_text(app)
        assert "others 2.3 GB" in text and "free 22.6 GB of 79.6 GB" in text
        torch = _row(text, "torch")  # the allocator, on the memory bar's scale, right below it
        assert "allocated 6.3 GB · reserved 9.0 GB · cached, unused 2.7 GB" in torch
        assert torch.index("█") == _row(text, "memory").index("█")
        assert "GPU 0 · NVIDIA H100 80GB HBM3 (1/2, g: next)" in text
        for label in ("SM busy", "mem busy", "DRAM bw", "PCIe", "NVLink"):
            assert label in text, label
        # the stall (0 % readings) is drawn in the columns of the same seconds of stage history
        sm = _row(text, "SM busy")
        dots = [i for i, ch in enumerate(sm) if ch == "·"]
        assert len(dots) == len(STALL) and dots == list(range(dots[0], dots[0] + len(STALL)))
        header = next(line for line in text.splitlines() if "history" in line and "stage" in line)
        _bar, spark_w, _lat = stage_columns(app.displayed, app.query_one(StagePanel).content_region.width)
        windows = len(app.displayed.history)
        assert dots[0] == header.index("history") + spark_w - (windows - STALL[0])


async def test_seeking_back_shows_the_readings_of_that_moment(gpu_source) -> None:
    app = create_app(gpu_source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await pilot.press("home")
        await wait_for(pilot, lambda: app.displayed.replay.position == 0.0)
        await pilot.press(*["full_stop"] * 9)  # seek: the flame has the focus, and → with it
        await wait_for(pilot, lambda: app.displayed.replay.position >= 44)
        await pilot.pause(0.05)
        readings = app.displayed.nvml.readings
        assert readings and readings[-1].t <= app.displayed.t
        assert _row(screen_text(app), "SM busy").count("·") == len(STALL)


async def test_g_moves_to_the_next_gpu_and_back(gpu_source) -> None:
    app = create_app(gpu_source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "GPU 0 · NVIDIA")
        await pilot.press("g")
        await shows(pilot, app, "GPU 1 · NVIDIA H100 80GB HBM3 (2/2, g: next)")
        text = screen_text(app)
        assert "this process 0 B" in text and "others 1000.0 MB" in text  # another job's GPU
        assert "cached, unused" not in text  # the allocator is about the target's GPU
        await pilot.press("g")
        await shows(pilot, app, "GPU 0 · NVIDIA H100 80GB HBM3 (1/2")


async def test_short_terminal_keeps_memory_and_sm_busy(gpu_source) -> None:
    app = create_app(gpu_source, title="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "SM busy")
        text = screen_text(app)
        assert "GPU 0 mem" in text and "this process 54.7 GB" in text and "PCIe" not in text
        assert "Model.forward" in text or "serve_forever" in text  # the flame still has rows


async def test_a_recording_without_readings_says_so_in_one_line(tmp_path: Path) -> None:
    app = create_app(replay(write_recording(tmp_path / "cpu.infertop")), title="t")
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "GPU  no GPU readings in this session")
        assert app.query_one(GpuPanel).size.height <= 3
        assert "Server.handle_batch" in screen_text(app)


@pytest.mark.parametrize(
    "lib,line",
    [
        (FakeNvml("h100_pair.json", init_error="LibraryNotFound"),
         "GPU  no GPU: NVML library not found (no NVIDIA driver on this host)"),
        (FakeNvml(None), "GPU  no GPU: NVML sees 0 devices"),
        (FakeNvml("h100_pair.json", init_error="LibRmVersionMismatch"),
         "GPU  no GPU: NVML library and driver versions do not match"),
    ],
    ids=["no-library", "no-device", "driver-mismatch"],
)  # fmt: skip
async def test_live_without_nvml_shows_the_reason_and_everything_else_works(lib, line: str) -> None:
    nvml = NvmlCollector(TARGET.pid, lib=lib)
    source = LiveSource(TARGET, Config(), collectors=[ScriptedCollector(), nvml])
    app = create_app(source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, line)
        await shows(pilot, app, "Model.forward")
        await pilot.press("g", "o", "o", "o")  # no GPU to move to; other views are unaffected
        await shows(pilot, app, "Model.forward")
        assert "nvml: unavailable" in screen_text(app)


async def test_live_readings_are_shown_recorded_and_replayed(tmp_path: Path) -> None:
    path = tmp_path / "live.infertop"
    lib = FakeNvml("h100_pair.json", target_pid=TARGET.pid or 0)
    nvml = NvmlCollector(TARGET.pid, interval=0.05, lib=lib)
    source = LiveSource(TARGET, Config(), collectors=[ScriptedCollector(window_s=0.1), nvml], record_path=str(path))
    app = create_app(source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "this process 54.7 GB")
        await wait_for(pilot, lambda: app.displayed.nvml is not None and len(app.displayed.nvml.readings) >= 3)
    assert not lib.initialised  # NVML shut down when the session ended
    rec = read_recording(str(path))
    assert sum(isinstance(e, GpuReading) for e in rec.events) >= 3
    again = create_app(ReplaySource(rec, Config()), title="replay")
    async with again.run_test(size=(120, 40)) as pilot:
        await started(pilot, again)
        await shows(pilot, again, "this process 54.7 GB")
        assert "GPU 0 · NVIDIA H100 80GB HBM3" in screen_text(again)
