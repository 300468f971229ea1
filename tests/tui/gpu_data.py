"""Recordings with NVML readings for the GPU panel tests.

The readings come out of the real NVML layer (``NvmlReader``) reading the fake pynvml of
tests/support/fake_nvml.py, i.e. from tests/fixtures/nvml/ (values built from NVML's
documented semantics and units), at 2 Hz beside one py-spy window a second.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from tui_data import MAIN_TID, TARGET, make_window

from infertop.analysis.session import Session
from infertop.collect.nvml import NvmlReader
from infertop.model.events import CollectorStatus, Event, Marker, StageSpan
from infertop.model.gpu import GpuReading
from infertop.record.writer import RecordingWriter
from tests.collect.ops_data import make_allocator
from tests.support.fake_nvml import FakeNvml

#: seconds (windows) in which the target's GPU stalls: utilisation 0 %
STALL = range(40, 44)


def gpu_readings(t0: float, seconds: int, fixture: str = "h100_pair.json") -> list[GpuReading]:
    """Two readings a second from the fixture's ticks; the target's GPU is idle in STALL."""
    lib = FakeNvml(fixture, target_pid=TARGET.pid or 0)
    reader = NvmlReader(TARGET.pid, lib)
    out = []
    for k in range(seconds * 2):
        r = reader.read()
        lib.advance()
        t = t0 + k * 0.5 + 0.25
        devices = r.devices
        if int(k / 2) in STALL:
            devices = tuple(
                replace(d, util_gpu=0.0, util_memory=0.0, dram_bw_util=0.0) if d.process_memory else d
                for d in devices
            )
        out.append(GpuReading(t, devices))
    reader.close()
    return out


def write_gpu_recording(path: Path, windows: int = 60, allocator: bool = True, seed: int = 7) -> Path:
    """A recording as ``LiveSource`` writes one with the NVML collector on."""
    rng = random.Random(seed)
    session = Session()
    writer = RecordingWriter(str(path))
    t0 = TARGET.started
    session.apply(TARGET)
    writer.write([
        TARGET,
        CollectorStatus(t0, "py-spy", "running", "100 Hz, all threads"),
        CollectorStatus(t0, "nvml", "running", "2 GPU(s), every 0.5 s"),
        Marker(t0, "recording started"),
    ])  # fmt: skip
    readings = gpu_readings(t0, windows)
    for i in range(windows):
        raw = make_window(rng, t0 + i, 1.0, phase=0.3)
        batch: list[Event] = list(session.intern(raw))
        batch += [r for r in readings if t0 + i < r.t <= t0 + i + 1]
        if allocator:
            batch.append(make_allocator(t0 + i + 0.5, i))
        for k in range(8):
            start = t0 + i + k * 0.12
            batch.append(StageSpan(MAIN_TID, "forward", start, start + rng.gauss(0.045, 0.01)))
        writer.write(batch)
    writer.close()
    return path
