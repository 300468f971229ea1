"""``infertop run -- CMD...``: start a command and open the live UI on it."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.commands.common import add_collect_flags, add_record_flag, need_tty
from infertop.errors import UsageError

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig


def add_arguments(p: argparse.ArgumentParser, agent: AgentConfig | None) -> None:
    add_record_flag(p)
    add_collect_flags(p, agent)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")


def run(args: argparse.Namespace) -> int:
    # imported here: the child's control, the collectors and the UI load only when one runs
    from infertop.commands.child import run_child
    from infertop.commands.wiring import CollectOptions

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UsageError("no command given", "infertop run -- python server.py --port 8000")
    need_tty("run")
    opts = CollectOptions.from_args(args)
    return run_child(cmd, opts, args.record, f"infertop-run-{int(time.time())}.log")


COMMAND = Command(
    "run", "start a command and open the live UI on it", add_arguments, run, collecting=True
)
