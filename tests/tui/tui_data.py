"""Real data for the TUI tests: synthetic-but-realistic py-spy windows, recordings, screens.

The workload is a small batching inference server: a main thread that tokenizes, runs the
model, synchronises, decodes and serialises, and a batcher thread that waits on a queue.
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from infertop.analysis.session import Session
from infertop.collect.pyspy import RawSampleWindow
from infertop.model.events import (
    CollectorStatus,
    Event,
    Frame,
    Marker,
    StageSpan,
    TargetExited,
    TargetInfo,
)
from infertop.record.writer import RecordingWriter
from infertop.tui.widgets.flame_panel import FlamePanel
from infertop.tui.widgets.timeline import Timeline
from tests.collect.ops_data import make_allocator, make_op_window

SITE = "/opt/venv/lib/python3.11/site-packages"
LIB = "/usr/lib/python3.11"
APP = "/srv/app"

MAIN_TID, BATCHER_TID = 140001, 140002


def _f(function: str, file: str, line: int) -> Frame:
    return Frame(function, file, line)


SERVE = [
    _f("<module>", f"{APP}/serve.py", 142),
    _f("main", f"{APP}/serve.py", 131),
    _f("Server.serve_forever", f"{APP}/serve.py", 88),
    _f("Server.handle_batch", f"{APP}/serve.py", 61),
]
CALL = _f("Module._call_impl", f"{SITE}/torch/nn/modules/module.py", 1527)
MODEL = [*SERVE, _f("Model.forward", f"{APP}/model.py", 74), CALL]
BLOCK = [*MODEL, _f("Block.forward", f"{APP}/model.py", 41), CALL]

#: stage -> (stack, weight per window); frames are root first
MAIN_STACKS: dict[str, list[tuple[tuple[Frame, ...], int]]] = {
    "preprocess": [
        (
            (
                *SERVE,
                _f("Tokenizer.encode_batch", f"{APP}/tokenizer.py", 88),
                _f("Tokenizer.encode", f"{APP}/tokenizer.py", 61),
                _f("Tokenizer._bpe", f"{APP}/tokenizer.py", 40),
            ),
            9,
        ),
        (
            (
                *SERVE,
                _f("parse_request", f"{APP}/serve.py", 33),
                _f("loads", f"{LIB}/json/__init__.py", 346),
                _f("JSONDecoder.decode", f"{LIB}/json/decoder.py", 337),
            ),
            3,
        ),
    ],
    "forward": [
        (
            (
                *BLOCK,
                _f("MultiheadAttention.forward", f"{SITE}/torch/nn/modules/activation.py", 1241),
            ),
            22,
        ),
        ((*BLOCK, _f("Linear.forward", f"{SITE}/torch/nn/modules/linear.py", 116)), 14),
        ((*MODEL, _f("LayerNorm.forward", f"{SITE}/torch/nn/modules/normalization.py", 201)), 5),
    ],
    "sync": [
        (
            (
                *SERVE,
                _f("Server.to_host", f"{APP}/serve.py", 70),
                _f("synchronize", f"{SITE}/torch/cuda/__init__.py", 801),
            ),
            10,
        ),
    ],
    "postprocess": [
        (
            (
                *SERVE,
                _f("Server.decode_outputs", f"{APP}/serve.py", 77),
                _f("Tokenizer.decode", f"{APP}/tokenizer.py", 102),
            ),
            8,
        ),
    ],
    "serialize": [
        (
            (
                *SERVE,
                _f("Server.write_response", f"{APP}/serve.py", 84),
                _f("dumps", f"{LIB}/json/__init__.py", 231),
                _f("JSONEncoder.encode", f"{LIB}/json/encoder.py", 200),
                _f("JSONEncoder.iterencode", f"{LIB}/json/encoder.py", 258),
            ),
            6,
        ),
    ],
    "other": [((*SERVE, _f("Server.log_metrics", f"{APP}/serve.py", 95)), 4)],
}
BATCHER_STACK = (
    _f("Thread._bootstrap", f"{LIB}/threading.py", 995),
    _f("Thread._bootstrap_inner", f"{LIB}/threading.py", 1038),
    _f("Thread.run", f"{LIB}/threading.py", 975),
    _f("Batcher.loop", f"{APP}/serve.py", 30),
    _f("Queue.get", f"{LIB}/queue.py", 171),
    _f("Condition.wait", f"{LIB}/threading.py", 327),
)

TARGET = TargetInfo(
    pid=4242,
    cmdline=f"/opt/venv/bin/python {APP}/serve.py --model llama-7b --port 8000 --max-batch 16",
    python="3.11.7",
    torch="2.3.1",
    started=1_700_000_000.0,
)


def make_window(
    rng: random.Random, t_start: float, window_s: float, rate_hz: float = 100.0, phase: float = 0.0
) -> RawSampleWindow:
    """One window of samples; ``phase`` (0..1) shifts time from preprocess towards forward."""
    ticks = max(1, round(window_s * rate_hz))
    scale = ticks / 100.0
    rows: list[tuple[int, str, tuple[Frame, ...], int]] = []
    for stage, stacks in MAIN_STACKS.items():
        for stack, weight in stacks:
            w = weight * (
                1 + phase if stage == "forward" else 1 - 0.5 * phase if stage == "preprocess" else 1
            )
            n = max(0, round(w * scale * rng.uniform(0.7, 1.3)))
            if n:
                rows.append((MAIN_TID, "MainThread", stack, n))
    busy = sum(r[3] for r in rows)
    if busy > ticks:  # never more samples than the sampler looked
        rows = [(a, b, c, max(1, n * ticks // busy)) for a, b, c, n in rows]
    rows.append(
        (BATCHER_TID, "batcher", BATCHER_STACK, max(1, round(30 * scale * rng.uniform(0.5, 1.5))))
    )
    return RawSampleWindow(t_start, t_start + window_s, rate_hz, ticks, tuple(rows), 0, 0.0)


def write_recording(
    path: Path,
    windows: int = 60,
    exited: bool = False,
    seed: int = 7,
    ops: bool = False,
    agent: CollectorStatus | None = None,
) -> Path:
    """A recording as ``LiveSource`` writes one: a prelude, then each window's events.

    ``ops``: the agent is attached too: a torch-profiler window (0.5 s) every 10 s and an
    allocator reading each second. ``agent``: a status for the agent (e.g. unavailable)."""
    rng = random.Random(seed)
    session = Session()
    writer = RecordingWriter(str(path))
    t0 = TARGET.started
    session.apply(TARGET)
    status = CollectorStatus(t0, "py-spy", "running", "100 Hz, all threads")
    prelude: list[Event] = [TARGET, status, Marker(t0, "recording started")]
    if ops:
        prelude.append(CollectorStatus(t0, "agent", "running", "torch.profiler 0.5 s every 10 s"))
    if agent is not None:
        prelude.append(agent)
    writer.write(prelude)
    for i in range(windows):
        raw = make_window(rng, t0 + i, 1.0, phase=min(1.0, i / max(1, windows - 1)))
        batch: list[Event] = list(session.intern(raw))
        if ops:
            batch.append(make_allocator(t0 + i + 0.5, i))
            if i % 10 == 1:
                batch.append(make_op_window(rng, t0 + i + 0.2))
        for k in range(8):  # eight forward calls a second, with real-looking latencies
            start = t0 + i + k * 0.12
            batch.append(StageSpan(MAIN_TID, "forward", start, start + rng.gauss(0.045, 0.01)))
        writer.write(batch)
    if exited:
        t_end = t0 + windows
        writer.write(
            [CollectorStatus(t_end, "py-spy", "stopped", "target exited"), TargetExited(t_end)]
        )
    writer.close()
    return path


#: a serving loop that tokenizes (26 %), runs the model (47 %) and serialises (24 %): the
#: icicle's three siblings under ``Server.loop`` (stack, samples per window)
LOOP = [
    _f("<module>", f"{APP}/serve.py", 142),
    _f("main", f"{APP}/serve.py", 131),
    _f("Server.loop", f"{APP}/serve.py", 88),
]
LOOP_STACKS: list[tuple[tuple[Frame, ...], int]] = [
    (
        (
            *LOOP,
            _f("Tokenizer.encode_batch", f"{APP}/tokenizer.py", 88),
            _f("Tokenizer.encode", f"{APP}/tokenizer.py", 61),
        ),
        26,
    ),
    (
        (
            *LOOP,
            _f("Model.forward", f"{APP}/model.py", 74),
            _f("Linear.forward", f"{SITE}/torch/nn/modules/linear.py", 116),
        ),
        47,
    ),
    (
        (
            *LOOP,
            _f("Server.write_response", f"{APP}/serve.py", 84),
            _f("dumps", f"{LIB}/json/__init__.py", 231),
            _f("JSONEncoder.encode", f"{LIB}/json/encoder.py", 200),
        ),
        24,
    ),
    ((*LOOP, _f("Server.log_metrics", f"{APP}/serve.py", 95)), 3),
]


def write_stacks_recording(
    path: Path, stacks: list[tuple[tuple[Frame, ...], int]] = LOOP_STACKS, windows: int = 10
) -> Path:
    """A recording of one thread whose every 1 s window holds exactly ``stacks``."""
    session = Session()
    writer = RecordingWriter(str(path))
    t0 = TARGET.started
    session.apply(TARGET)
    writer.write([TARGET, CollectorStatus(t0, "py-spy", "running", "100 Hz, all threads")])
    rows = tuple((MAIN_TID, "MainThread", stack, n) for stack, n in stacks)
    for i in range(windows):
        raw = RawSampleWindow(t0 + i, t0 + i + 1, 100.0, 100, rows, 0, 0.0)
        writer.write(list(session.intern(raw)))
    writer.close()
    return path


class ScriptedCollector:
    """A collector that produces realistic windows in real time (instead of running py-spy)."""

    name = "py-spy"

    def __init__(self, window_s: float = 0.2, exit_after: int | None = None, seed: int = 3) -> None:
        self.window_s = window_s
        self.exit_after = exit_after
        self.rng = random.Random(seed)
        self.started = False
        self.stopped = False
        self._next = 0.0
        self._made = 0
        self._pending: list[object] = []

    def start(self) -> None:
        self.started = True
        self._next = time.time()
        self._pending.append(
            CollectorStatus(time.time(), self.name, "running", "100 Hz, all threads")
        )

    def poll(self) -> list[object]:
        now = time.time()
        while not self.stopped and now >= self._next + self.window_s:
            if self.exit_after is not None and self._made >= self.exit_after:
                self._pending += [
                    TargetExited(now),
                    CollectorStatus(now, self.name, "stopped", "target exited"),
                ]
                self.stopped = True
                break
            self._pending.append(make_window(self.rng, self._next, self.window_s, phase=0.3))
            self._next += self.window_s
            self._made += 1
        out, self._pending = self._pending, []
        return out

    def stop(self) -> None:
        self.stopped = True


# -- reading the screen ---------------------------------------------------------------------------
def screen_text(app: Any) -> str:
    """The visible screen as plain text, one line per row: what the SVG screenshot shows (the
    same render of the screen and the screens behind it), without making the SVG (a tenth of
    the time: the tests poll it)."""
    width, height = app.size
    console = Console(
        width=width, height=height, file=io.StringIO(), force_terminal=True, color_system=None,
        record=True, legacy_windows=False, safe_box=False,
    )  # fmt: skip
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    lines = console.export_text().split("\n")[:height]
    return "\n".join(line.rstrip() for line in lines)


async def wait_for(pilot: Any, condition: Callable[[], object], timeout: float = 5.0) -> None:
    """Let the app run until ``condition()`` is true (the worker answers in milliseconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the UI")
        await pilot.pause(0.02)


# -- reading the app -----------------------------------------------------------------------------
def flame_header(app: Any) -> str:
    """The flame panel's header line: stage filter and breadcrumb."""
    return app.query_one(FlamePanel).header_text(200)


def position(app: Any) -> str:
    """The timeline's ``position / length``."""
    return app.query_one(Timeline).position_text


async def started(pilot: Any, app: Any) -> None:
    """Wait for the first snapshot with samples on the panels, and for it to be drawn."""
    await wait_for(pilot, lambda: app.displayed is not None and app.displayed.samples > 0)
    await pilot.pause(0.05)


async def shows(pilot: Any, app: Any, text: str, timeout: float = 5.0) -> None:
    """Wait until ``text`` is on the screen (widgets draw on the next refresh, not at once)."""
    await wait_for(pilot, lambda: text in screen_text(app), timeout)
