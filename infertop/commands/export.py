"""``infertop export FILE --format F -o OUT``: a recording or trace in another tool's format."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.commands.common import add_config_flags, load_cfg
from infertop.errors import EXIT_OK
from infertop.export.formats import FORMATS, formats_help

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig


def add_arguments(p: argparse.ArgumentParser, _agent: AgentConfig | None) -> None:
    p.add_argument("file", help="a recording, or a torch.profiler trace .json[.gz]")
    p.add_argument("--format", choices=list(FORMATS), required=True)
    p.add_argument("-o", "--output", required=True, metavar="OUT")
    add_config_flags(p)


def run(args: argparse.Namespace) -> int:
    # imported here: the exporters load only when one runs
    from infertop.export.run import export

    res = export(args.file, args.format, args.output, load_cfg(args.config, args.stage, slow=args.slow))
    if res.warning:
        print(f"infertop: warning: {res.warning}", file=sys.stderr)
    print(f"infertop: wrote {res.output} ({res.events:,} events, {args.format})", file=sys.stderr)
    return EXIT_OK


COMMAND = Command(
    "export",
    "a recording or trace as a Chrome/Perfetto trace, speedscope, a Kineto trace or pprof",
    add_arguments,
    run,
    description=formats_help(),
)
