"""``infertop attach PID...``: the live UI on running processes."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.commands.common import add_collect_flags, add_record_flag, need_tty, targets

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig


def add_arguments(p: argparse.ArgumentParser, agent: AgentConfig | None) -> None:
    p.add_argument(
        "pid", type=int, nargs="+",
        help="process id of the Python process; several PIDs (e.g. the workers of a pool) are "
        "one session, the first one the target",
    )  # fmt: skip
    add_record_flag(p)
    add_collect_flags(p, agent)


def run(args: argparse.Namespace) -> int:
    # imported here: the collectors and the UI load only when a command collects
    from infertop.commands.wiring import CollectOptions, live

    need_tty("attach")
    target, others = targets(args.pid)
    return live(target, CollectOptions.from_args(args), args.record, others)


COMMAND = Command("attach", "live UI on a running process", add_arguments, run, collecting=True)
