"""``infertop replay FILE``: the live UI on a recording, with a timeline."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.commands.common import add_config_flags, load_cfg, need_tty
from infertop.errors import EXIT_OK

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig


def add_arguments(p: argparse.ArgumentParser, _agent: AgentConfig | None) -> None:
    p.add_argument("file")
    p.add_argument(
        "--base", metavar="OLD",
        help="a base recording: the flame is coloured by how much each frame grew (red) or "
        "shrank (blue) against it, widths from FILE (the differential flame)",
    )  # fmt: skip
    add_config_flags(p)


def run(args: argparse.Namespace) -> int:
    # imported here: the reader and the sources load only when a recording is read
    from infertop.record.reader import read_recording
    from infertop.sources import ReplaySource

    rec = read_recording(args.file)
    base_rec = read_recording(args.base) if args.base else None
    need_tty("replay")
    # imported here, after the terminal check: Textual (heavy) loads only when it can be shown
    from infertop.analysis.base_profile import BaseProfile
    from infertop.tui.app import create_app

    cfg = load_cfg(args.config, args.stage, slow=args.slow)
    src = ReplaySource(rec, cfg)
    base = None
    title = f"infertop — replay {os.path.basename(args.file)}"
    if base_rec is not None:
        base = BaseProfile(ReplaySource(base_rec, cfg).session, args.base)
        title += f" vs base {os.path.basename(args.base)}"
    create_app(src, title=title, base=base).run()
    return EXIT_OK


COMMAND = Command("replay", "the live UI on a recording, with a timeline", add_arguments, run)
