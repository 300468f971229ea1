"""The host memory panel beside the GPU panel: RSS and its split, growth, and the headroom to
the cgroup's limit at a glance; hidden for a recording without host memory."""

from __future__ import annotations

from pathlib import Path

from tui_data import TARGET, screen_text, shows, started, write_recording

from infertop.analysis.host_memory import summarize_host_memory
from infertop.analysis.snapshot import Snapshot
from infertop.config import Config
from infertop.model.events import TargetInfo
from infertop.model.host_memory import CgroupMemory, HostMemoryReading
from infertop.record.reader import read_recording
from infertop.record.writer import RecordingWriter
from infertop.sources import ReplaySource
from infertop.tui import create_app
from infertop.tui.widgets.gpu import GpuPanel
from infertop.tui.widgets.memory import MemoryPanel, render_memory

MIB = 1 << 20


def _readings(
    pid: int, t0: float, seconds: int, limit: int | None = 2048 * MIB
) -> list[HostMemoryReading]:
    """A process leaking 1 MiB/s from 600 MiB, in a cgroup whose usage is its RSS + 1 GiB."""
    out = []
    for k in range(seconds):
        rss = (600 + k) * MIB
        cg = CgroupMemory(2, "/infer.slice", limit, rss + 1024 * MIB, 1)
        out.append(HostMemoryReading(t0 + k, pid, rss, rss - 80 * MIB, 70 * MIB, 10 * MIB, 0,
                                     5000 + k, 3 * k, cg))  # fmt: skip
    return out


def _snap(readings: list[HostMemoryReading], process: int | None = None) -> Snapshot:
    return Snapshot(
        t=0.0, t_first=0.0, target=TargetInfo(1), totals=(), recent=(), history=(), flame=None,  # type: ignore[arg-type]
        stage_filter=None, top=(), statuses=(), samples=0, errors=0, lag_s=0.0, rate_hz=0.0,
        coverage=0.0, exited=None, host_memory=summarize_host_memory(readings), process=process,
    )  # fmt: skip


def test_the_text_says_rss_growth_and_the_headroom() -> None:
    text = render_memory(_snap(_readings(7, 1000.0, 60)), 60).plain
    lines = text.splitlines()
    assert (
        lines[0].startswith("rss    659.0 MB")
        and "anon 579.0 MB · file 70.0 MB · shm 10.0 MB" in lines[0]
    )
    assert lines[1].startswith("swap   0 B · major faults 3.0/s · OOM kills 1")
    assert lines[2].startswith("growth +1.0 MB/s · peak 659.0 MB")
    assert (
        lines[3].endswith("82% of 2.0 GB · 365.0 MB left")
        and "█" in lines[3]
        and len(lines[3]) <= 60
    )
    compact = render_memory(_snap(_readings(7, 1000.0, 60)), 60, compact=True).plain.splitlines()
    assert len(compact) == 2 and compact[1].startswith("limit")
    no_limit = render_memory(_snap(_readings(7, 1000.0, 3, limit=None)), 60).plain
    assert "limit  none (cgroup v2, 1.6 GB used)" in no_limit and "growth not yet" in no_limit
    assert render_memory(_snap([]), 60).plain == "host memory: nothing read"
    both = _readings(7, 1000.0, 20) + _readings(9, 1000.0, 20, limit=None)
    assert "none (cgroup v2" in render_memory(_snap(both, process=9), 60).plain


def _with_memory(tmp_path: Path) -> ReplaySource:
    base = read_recording(str(write_recording(tmp_path / "base.infertop")))
    path = str(tmp_path / "mem.infertop")
    w = RecordingWriter(path)
    w.write(list(base.events) + _readings(TARGET.pid or 0, TARGET.started, 60))
    w.close()
    return ReplaySource(read_recording(path), Config())


async def test_the_panel_stands_beside_the_gpu_panel(tmp_path: Path) -> None:
    app = create_app(_with_memory(tmp_path), title="t")
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "host memory · pid")
        text = screen_text(app)
        assert "82% of 2.0 GB · 365.0 MB left" in text and "growth +1.0 MB/s" in text
        gpu, memory = app.query_one(GpuPanel).region, app.query_one(MemoryPanel).region
        assert memory.x >= gpu.right and memory.y == gpu.y  # beside it, on the same rows
        await pilot.press("f")  # the stage and GPU panels hidden: this one too
        await pilot.pause()
        assert not app.query_one(MemoryPanel).display


async def test_without_host_memory_there_is_no_panel(replay_source) -> None:
    app = create_app(replay_source, title="t")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await shows(pilot, app, "GPU")
        assert not app.query_one(MemoryPanel).display and "host memory" not in screen_text(app)


def test_torch_row_with_profile_memory_calls() -> None:
    from dataclasses import replace

    from infertop.analysis.ops import TorchMemory
    from infertop.analysis.snapshot import Profiled
    from infertop.model.torch_memory import MemoryStage

    snap = _snap(_readings(7, 1000.0, 60))
    assert "torch" not in render_memory(snap, 60).plain  # not profiled so: no row
    stages = (MemoryStage("forward", "cuda", 4, 40, 48 * MIB, 48 * MIB, 12 * MIB, 40 * MIB),
              MemoryStage("forward", "cpu", 4, 4, MIB, MIB, MIB, MIB))  # fmt: skip
    snap = replace(snap, torch=Profiled(memory=TorchMemory(4, stages, ())))
    lines = render_memory(snap, 80).plain.splitlines()
    assert lines[-1] == "torch  forward peak 12.0 MB/call · 12.0 MB allocated/call · cuda"
