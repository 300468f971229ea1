"""Regenerate docs/screenshot.svg: the live demo once its finding is up, with the findings open.

    .venv/bin/python scripts/screenshot.py [--out docs/screenshot.svg] [--size 120x36] [--after 40]
    .venv/bin/python scripts/screenshot.py --recording FILE [--keys i]    # a replay instead

Live (the default): ``infertop demo`` runs in a tmux window of the given size, as a user would
start it; once its status line shows a finding, ``i`` opens the findings and Textual's own
screenshot (``TEXTUAL_SCREENSHOT``: the screen as the app drew it, then the app quits) is
saved. Needs tmux and the development environment (the sample runs on its torch); takes
``--after`` seconds plus the demo's start. ``--recording`` replays a
recording instead and presses ``--keys`` before the picture.

Either way the image's paths are scrubbed as the test fixtures' are
(``tests/support/fixture_paths.py``): the repository's relative to it, a home folder as ``~``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.fixture_paths import scrub_text  # noqa: E402


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def shoot_demo(width: int, height: int, after: float) -> str:
    """The live demo's screen ``after`` seconds in, the findings open."""
    if shutil.which("tmux") is None:
        sys.exit("needs tmux (or use --recording FILE)")
    with tempfile.TemporaryDirectory() as tmp:
        session = f"infertop-screenshot-{os.getpid()}"
        env = {
            "TEXTUAL_SCREENSHOT": str(int(after)),
            "TEXTUAL_SCREENSHOT_LOCATION": tmp,
            "TEXTUAL_SCREENSHOT_FILENAME": "shot.svg",
        }
        cmd = " ".join(f"{k}={v}" for k, v in env.items())
        cmd += f" {sys.executable} -m infertop demo"
        _tmux(
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            str(width),
            "-y",
            str(height),
            "-c",
            str(REPO),
            cmd,
        )
        shot = Path(tmp) / "shot.svg"
        try:
            opened = False
            deadline = time.monotonic() + after + 60  # the demo's start, torch's import
            while not shot.is_file() and time.monotonic() < deadline:
                time.sleep(1.0)
                try:
                    screen = _tmux("capture-pane", "-p", "-t", session)
                except subprocess.CalledProcessError:
                    break  # the demo ended
                if not opened and "finding" in screen and "⚑" in screen:
                    time.sleep(2.0)  # a beat for the status line's first finding to settle
                    _tmux("send-keys", "-t", session, "i")
                    opened = True
            if not shot.is_file():
                sys.exit(f"no screenshot after {after:.0f} s (finding seen: {opened})")
            time.sleep(0.5)  # written whole before the app quits; a beat to be sure
            svg = shot.read_text(encoding="utf-8")
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    if not opened:
        sys.exit("the demo showed no finding before the screenshot: run longer (--after)")
    return svg


async def shoot_replay(recording: str, keys: list[str], width: int, height: int) -> str:
    from infertop.config import Config
    from infertop.record.reader import read_recording
    from infertop.sources import ReplaySource
    from infertop.tui.app import create_app

    app = create_app(ReplaySource(read_recording(recording), Config()), title="infertop")
    async with app.run_test(size=(width, height)) as pilot:
        await pilot.pause(1.5)
        if keys:
            await pilot.press(*keys)
            await pilot.pause(1.0)
        return app.export_screenshot(title="infertop")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default=str(REPO / "docs" / "screenshot.svg"))
    ap.add_argument("--size", default="120x36")
    ap.add_argument(
        "--after", type=float, default=40.0, help="seconds of the live demo before the picture"
    )
    ap.add_argument("--recording", help="replay this recording instead of running the demo")
    ap.add_argument("--keys", nargs="*", default=[], help="keys pressed on the replay first")
    args = ap.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    if args.recording:
        svg = asyncio.run(shoot_replay(args.recording, args.keys, w, h))
    else:
        svg = shoot_demo(w, h, args.after)
    Path(args.out).write_text(scrub_text(svg), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
