"""The UI seen as pixels: every panel and screen rendered at 80x24 and 160x50 from committed
recordings, compared whole (SVG, as Textual exports a screen) with the images saved under
``tests/data/snapshots/``. A change in a layout, a colour, a label or a number fails here; on a
failure the new image is written to the test's temporary folder and the screen's text is
shown.

Recordings: the recorded textgen sample (``tests/data/recordings/``), a recording with two GPUs'
NVML readings made from the fixtures (``gpu_data``), two real traces imported as a directory
of ranks, committed (the processes screen), and a recording with GC pauses, event-loop lag and
call samples (the stage panel's pause rows, the tail view), and one of real Hugging Face
``generate`` calls (the generation rows). Textual is pinned in
requirements-dev.txt, since its renderer draws the pixels. An intended change of look is accepted by regenerating them:
``INFERTOP_UPDATE_SNAPSHOTS=1 python -m pytest tests/tui/test_snapshots.py``. What is compared
and written has this machine's paths scrubbed (``tests/support/fixture_paths.py``), as the
committed recordings have: an image reads the same wherever the checkout is."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from gpu_data import write_gpu_recording
from tui_data import screen_text, wait_for

from infertop.analysis.base_profile import BaseProfile
from infertop.config import Config
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from infertop.tui import create_app
from tests.support import data
from tests.support.fixture_paths import scrub_text

SNAPSHOTS = data.DATA / "snapshots"
RECORDING = data.DATA / "recordings" / "textgen_service.infertop"
#: two real traces (A100 sampled, CPU only) imported as a directory of ranks (recordings/README)
RANKS = data.DATA / "recordings" / "ranks_a100_cpu.infertop"
#: the same sample with its naive tokenizer: replayed against RECORDING, the differential flame
SLOW = data.DATA / "recordings" / "textgen_slow_tokenizer.infertop"
#: GC pauses, an event loop's lag and the agent's call samples (recordings/README)
TAIL = data.DATA / "recordings" / "tail_pauses.infertop"
#: real Hugging Face generate calls (recordings/README): the stage panel's generation rows
HF = data.DATA / "recordings" / "textgen_hf.infertop"
UPDATE = os.environ.get("INFERTOP_UPDATE_SNAPSHOTS") == "1"
SIZES = [(80, 24), (160, 50)]
#: view name -> (keys pressed on the replay of the recorded sample, text on the screen once
#: the view is drawn)
VIEWS = {
    "stages": ((), "wall · last 5 s"),
    "cpu-view": (("c",), "cpu · last 5 s"),
    "torch-ops-flame": (("o",), "torch ops"),
    "ops-table": (("o", "o"), "ops table by self time"),
    "flame-only": (("f",), "Batcher.run"),  # the icicle graph, the default style, folded
    "flame-unfolded": (("f", "z"), "Thread._bootstrap"),  # every frame, plumbing too
    "flame-list": (("f", "t"), "Python list"),
    "flame-list-unfolded": (("f", "t", "z"), "Thread._bootstrap"),
    "flame-zoom": (("f", "down", "down", "down", "enter"), "(33.0%)"),
    "flame-search": (("f", "slash", *"tokeniz*", "enter"), "tokeniz*: "),
    "findings": (("i",), "findings · 1"),
    "help": (("question_mark",), "infertop help (replay)"),
}


@pytest.fixture(autouse=True)
def _colours(monkeypatch: pytest.MonkeyPatch) -> None:
    """The images are in colour whatever the shell says: ``NO_COLOR`` (read when an app is made)
    would turn them grey."""
    monkeypatch.delenv("NO_COLOR", raising=False)


def _recording(kind: str, tmp_path: Path) -> Path:
    if kind == "gpu":
        return write_gpu_recording(tmp_path / "gpu.infertop")
    path = RANKS if kind == "ranks" else RECORDING
    if not path.is_file():
        pytest.fail(f"test data missing: {path}")
    return path


async def _render(
    path: Path, keys: tuple[str, ...], size: tuple[int, int], shown: str, base: Path | None = None
) -> tuple[str, str]:
    profile = None
    if base is not None:
        profile = BaseProfile(ReplaySource(read_recording(str(base)), Config()).session, base.name)
    source = ReplaySource(read_recording(str(path)), Config())
    app = create_app(source, title="infertop", base=profile)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.displayed is not None, 20.0)  # the first snapshot
        if keys:
            await pilot.press(*keys)
        await wait_for(pilot, lambda: shown in screen_text(app), 20.0)
        # drawn and settled: the newest snapshot on the panels and the same screen for a second
        # (the worker publishes a new snapshot within milliseconds of a key, the widgets draw it
        # on their next refresh; half a second of calm was once too short beside other tests)
        # (the text is polled, a tenth of the SVG's cost; the SVG, colours too, is then taken
        # twice a moment apart and must agree)
        last, since = "", time.monotonic()

        def settled() -> bool:
            nonlocal last, since
            now = screen_text(app)
            if now != last or app.latest is not app.displayed:
                last, since = now, time.monotonic()
            return time.monotonic() - since >= 1.0

        deadline = time.monotonic() + 20.0
        while True:
            await wait_for(pilot, settled, max(1.0, deadline - time.monotonic()))
            svg = app.export_screenshot()
            await pilot.pause(0.1)
            if app.export_screenshot() == svg or time.monotonic() > deadline:
                break
            since = time.monotonic()
        text = screen_text(app)
        await pilot.press("q")
    return svg, text


def _check(name: str, svg: str, text: str, tmp_path: Path) -> None:
    path = SNAPSHOTS / f"{name}.svg"
    svg, text = scrub_text(svg), scrub_text(text)
    if UPDATE:
        SNAPSHOTS.mkdir(parents=True, exist_ok=True)
        path.write_text(svg, encoding="utf-8")
        return
    if not path.is_file():
        pytest.fail(f"no snapshot {path}: make it with INFERTOP_UPDATE_SNAPSHOTS=1")
    saved = path.read_text(encoding="utf-8")
    if svg != saved:
        new = tmp_path / f"{name}.svg"
        new.write_text(svg, encoding="utf-8")
        a, b = saved.splitlines(), svg.splitlines()
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        first = f"line {at + 1}: saved {a[at][:300] if at < len(a) else '(end)'!r}\n" \
            f"         now   {b[at][:300] if at < len(b) else '(end)'!r}"
        pytest.fail(f"{name} renders differently from {path} (now: {new}); {first}\n"
                    f"the screen now:\n{text}")  # fmt: skip


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("view", list(VIEWS))
async def test_each_view_renders_as_saved(view: str, size: tuple[int, int], tmp_path: Path) -> None:
    keys, shown = VIEWS[view]
    svg, text = await _render(_recording("textgen", tmp_path), keys, size, shown)
    _check(f"{view}-{size[0]}x{size[1]}", svg, text, tmp_path)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize(
    "kind,keys,shown",
    [("gpu", (), "this process"), ("ranks", ("W",), "processes")],
    ids=["gpu", "processes"],
)
async def test_gpu_panel_and_processes_render_as_saved(
    kind: str, keys: tuple[str, ...], shown: str, size: tuple[int, int], tmp_path: Path
) -> None:
    svg, text = await _render(_recording(kind, tmp_path), keys, size, shown)
    _check(f"{kind if kind == 'gpu' else 'processes'}-{size[0]}x{size[1]}", svg, text, tmp_path)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_differential_flame_renders_as_saved(size: tuple[int, int], tmp_path: Path) -> None:
    """replay SLOW --base RECORDING: the tokenizer's frames red, the model's blue."""
    for path in (SLOW, RECORDING):
        if not path.is_file():
            pytest.fail(f"test data missing: {path}")
    svg, text = await _render(SLOW, ("f",), size, "vs base", base=RECORDING)
    _check(f"flame-diff-{size[0]}x{size[1]}", svg, text, tmp_path)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize(
    "view,keys,shown",
    [("stages-pauses", (), "loop lag"), ("tail", ("l",), "rare_slow_path")],
    ids=["stages-pauses", "tail"],
)
async def test_the_pause_rows_and_the_tail_view_render_as_saved(
    view: str, keys: tuple[str, ...], shown: str, size: tuple[int, int], tmp_path: Path
) -> None:
    """The stage panel with its gc and loop-lag rows; the tail view of preprocess."""
    if not TAIL.is_file():
        pytest.fail(f"test data missing: {TAIL}")
    svg, text = await _render(TAIL, keys, size, shown)
    _check(f"{view}-{size[0]}x{size[1]}", svg, text, tmp_path)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize(
    "view,keys,shown",
    [("stages-generation", (), "TTFT p50"), ("tail-generation", ("l", "S", "S"), "tail · decode")],
    ids=["stages", "tail"],
)
async def test_the_generation_rows_render_as_saved(
    view: str, keys: tuple[str, ...], shown: str, size: tuple[int, int], tmp_path: Path
) -> None:
    """The stage panel's prefill and decode rows, then TTFT, TPOT, tokens/s, the KV cache and
    the latency by batch size; the tail view of decode with the slowest generation calls, each
    with its queue, prefill and decode and the part that made it slow."""
    if not HF.is_file():
        pytest.fail(f"test data missing: {HF}")
    svg, text = await _render(HF, keys, size, shown)
    assert "decode" in text
    if view == "tail-generation" and size[1] >= 50:  # a low screen scrolls the list off
        assert "slowest generation calls" in text and "mostly decode" in text
    _check(f"{view}-{size[0]}x{size[1]}", svg, text, tmp_path)
