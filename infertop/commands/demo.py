"""``infertop demo``: the bundled sample service, with the live UI attached."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.commands.common import add_record_flag, need_tty

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig


def add_arguments(p: argparse.ArgumentParser, agent: AgentConfig | None) -> None:
    add_record_flag(p)
    p.add_argument(
        "--clean",
        action="store_true",
        help="run the sample without its planted bottleneck (a naive pure-Python tokenizer "
        "that holds ~65%% of the time: the preprocess-hot finding)",
    )
    p.add_argument(
        "--hf",
        action="store_true",
        help="serve with real Hugging Face generate instead (a random-weight GPT-2, a tokenizer "
        "trained on the spot, nothing downloaded): the stage panel splits each generation "
        "into prefill and decode",
    )
    # the bottleneck is the default now; the old flag is accepted and changes nothing
    p.add_argument("--slow-tokenizer", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    # imported here: tempfile, the child's control, the collectors and the UI load only when
    # the demo runs
    import tempfile

    from infertop.commands.child import run_child
    from infertop.commands.wiring import CollectOptions

    need_tty("demo")
    cmd = [sys.executable, "-m", "samples.textgen_service"]
    if args.hf:
        cmd.append("--hf")
    elif not args.clean:  # the demo teaches: one planted, realistic bottleneck to find
        cmd.append("--slow-tokenizer")
    log_path = os.path.join(tempfile.gettempdir(), f"infertop-demo-{os.getpid()}.log")
    # no collect flags of its own: the options of a command line that gives none
    return run_child(cmd, CollectOptions(), args.record, log_path)


COMMAND = Command(
    "demo",
    "start the bundled sample service (a slow tokenizer planted in it) and attach the live UI",
    add_arguments,
    run,
    collecting=True,
)
