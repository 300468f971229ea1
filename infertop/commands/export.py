"""``infertop export FILE --format F -o OUT``: a recording or trace in another tool's format."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.commands.common import add_config_flags, load_cfg
from infertop.errors import EXIT_OK
from infertop.export.formats import FORMATS

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig

DESCRIPTION = (
    "chrome: Trace Event Format JSON for Perfetto / chrome://tracing (gzip when OUT "
    "ends in .gz); speedscope: sampled CPU profiles per thread and per stage; kineto: the "
    "recording's torch.profiler windows as a trace for TensorBoard / Holistic Trace Analysis; "
    "pprof: the CPU samples as a gzipped "
    "pprof profile labelled by stage, thread and process (go tool pprof, Pyroscope, Parca); "
    "pprof-ops: the torch-profiler windows' op time as pprof (op path -> kernel). "
    "See docs/export.md."
)


def add_arguments(p: argparse.ArgumentParser, _agent: AgentConfig | None) -> None:
    p.add_argument("file", help="a recording, or a torch.profiler trace .json[.gz]")
    p.add_argument("--format", choices=FORMATS, required=True)
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
    description=DESCRIPTION,
)
