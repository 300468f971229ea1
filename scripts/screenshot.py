"""Regenerate docs/screenshot.svg: the replay UI on a real recording of the demo sample.

    python scripts/screenshot.py RECORDING [--out docs/screenshot.svg] [--size 120x36]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infertop.config import Config  # noqa: E402
from infertop.record.reader import read_recording  # noqa: E402
from infertop.sources import ReplaySource  # noqa: E402
from infertop.tui.app import create_app  # noqa: E402


async def shoot(recording: str, out: str, width: int, height: int) -> None:
    app = create_app(ReplaySource(read_recording(recording), Config()), title="infertop — pid 4242")
    async with app.run_test(size=(width, height)) as pilot:
        await pilot.pause(1.5)
        Path(out).write_text(app.export_screenshot(title="infertop"), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recording")
    ap.add_argument("--out", default="docs/screenshot.svg")
    ap.add_argument("--size", default="120x36")
    args = ap.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    asyncio.run(shoot(args.recording, args.out, w, h))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
