"""CPU to open the replay UI: from making the app to its first snapshot drawn, then the second
after it (the first draw settling), and quitting; the key bar (ours) against Textual's Footer
(the widget it replaced) side by side, alternating, on the committed recording of the textgen
sample (Textual's headless driver). Prints the medians in CPU seconds of this process.

    .venv/bin/python benchmarks/bench_ui_start.py [--runs 10] [--size 160x50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from textual.widgets import Footer  # noqa: E402

import infertop.tui.app as app_module  # noqa: E402
from infertop.config import Config  # noqa: E402
from infertop.record.reader import read_recording  # noqa: E402
from infertop.sources import ReplaySource  # noqa: E402
from infertop.tui import create_app  # noqa: E402
from infertop.tui.widgets.key_bar import KeyBar  # noqa: E402

RECORDING = ROOT / "tests" / "data" / "recordings" / "textgen_service.infertop"


def _footer(id: str | None = None) -> Footer:  # noqa: A002 - KeyBar's signature
    return Footer(compact=True, id=id)


async def _open(events: list, size: tuple[int, int]) -> tuple[float, float, float]:  # noqa: ANN001
    c0 = time.process_time()
    app = create_app(ReplaySource(events, Config()), title="infertop")
    async with app.run_test(size=size) as pilot:
        while app.displayed is None:
            await pilot.pause(0.01)
        c1 = time.process_time()
        await pilot.pause(1.0)
        c2 = time.process_time()
        await pilot.press("q")
    return c1 - c0, c2 - c1, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--size", default="160x50")
    args = ap.parse_args()
    size = tuple(int(x) for x in args.size.split("x"))
    events = read_recording(str(RECORDING))
    bars = {"key bar": KeyBar, "Textual Footer": _footer}
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in bars}
    asyncio.run(_open(events, size))  # warm: imports, CSS parsing caches
    for _ in range(args.runs):
        for name, bar in bars.items():
            app_module.KeyBar = bar  # what the app's compose yields
            results[name].append(asyncio.run(_open(events, size)))
    app_module.KeyBar = KeyBar
    print(f"CPU seconds to open the replay UI at {args.size}, median of {args.runs} runs each")
    print(f"{'':16} {'to first draw':>14} {'next second':>12} {'in all':>8}")
    for name, runs in results.items():
        first, settle, total = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{name:16} {first:14.3f} {settle:12.3f} {total:8.3f}")


if __name__ == "__main__":
    main()
