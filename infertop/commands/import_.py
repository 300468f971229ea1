"""``infertop import TRACE -o FILE``: a torch.profiler (Kineto) trace as a recording.

(``import_``: ``import`` is a keyword.)
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.errors import EXIT_OK
from infertop.words import plural

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig


def add_arguments(p: argparse.ArgumentParser, _agent: AgentConfig | None) -> None:
    p.add_argument("trace", help="TRACE.json[.gz], or a directory of per-rank traces")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="recording to write")


def run(args: argparse.Namespace) -> int:
    # imported here: the importer (numpy, the agent's reduction) loads only when it runs
    from infertop.record.importer import import_trace

    tty = sys.stderr.isatty()

    def progress(text: str) -> None:
        if tty:
            sys.stderr.write(f"\rinfertop: {text[:100]}\033[K")
            sys.stderr.flush()

    try:
        res = import_trace(args.trace, args.output, progress)
    finally:
        if tty:
            sys.stderr.write("\r\033[K")
    for line in (res.note or "").splitlines():
        print(f"infertop: {line}", file=sys.stderr)
    print(
        f"infertop: imported {res.trace}: {res.events:,} events, {res.seconds:.2f} s, "
        f"{res.windows} {plural(res.windows, 'window')} -> {res.output}",
        file=sys.stderr,
    )
    return EXIT_OK


COMMAND = Command(
    "import",
    "convert a torch.profiler (Kineto) trace into a recording for replay/report",
    add_arguments,
    run,
)
