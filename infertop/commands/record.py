"""``infertop record PID... -o FILE``: a headless recording (no terminal needed)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.commands.common import add_collect_flags, add_json_flag, targets
from infertop.commands.push_flags import add_push_flags, push_options
from infertop.errors import UsageError

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig


def add_arguments(p: argparse.ArgumentParser, agent: AgentConfig | None) -> None:
    p.add_argument("pid", type=int, nargs="+", help="process id(s), as for attach")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="recording to write")
    p.add_argument(
        "--duration", type=float, metavar="S", help="stop after S seconds (default: until Ctrl-C)"
    )
    add_json_flag(p)
    add_collect_flags(p, agent)
    add_push_flags(p)


def run(args: argparse.Namespace) -> int:
    # imported here: the collectors and the recording writer load only when a command collects
    from infertop.commands.wiring import CollectOptions, build_collectors
    from infertop.headless import record_headless

    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive")
    push = push_options(args)
    target, others = targets(args.pid)
    opts = CollectOptions.from_args(args)
    cfg = opts.load_config()
    collectors, statuses = build_collectors(target, opts, cfg, others)
    return record_headless(
        target, cfg, args.output, args.duration, collectors, statuses, push, args.json
    )


COMMAND = Command(
    "record", "record a process headless (no terminal needed)", add_arguments, run, collecting=True
)
