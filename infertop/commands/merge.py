"""``infertop merge FILE... -o OUT``: recordings of several hosts or services as one."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.errors import EXIT_OK

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig

DESCRIPTION = """\
Combine recordings made on different hosts (or of different services) into one
recording. Every input's processes become processes of the output (a recording made
without --children is one process: its target); pids and tids are renamed only where
two inputs share one; every event goes on one timeline. report, replay and export read
the result like any recording, and report gives a section per process (host and role)
beside the merged numbers.
"""

EPILOG = """\
clock:
  Recordings hold each host's wall-clock (unix) time; the inputs are aligned on it.
  A recording notes its host and whether that host's clock was synchronised (NTP/PTP),
  with the kernel's maxerror. merge prints, per input, the host, the offset applied and
  that clock state, then how well the whole lines up: the inputs' maxerror summed, or
  unknown when a clock was not synchronised or a recording predates clock anchors.
  A host whose clock you know is S seconds ahead: --offset FILE=-S. An offset given by
  hand replaces that input's clock: merge then claims no bound (its accuracy is yours
  to judge) and says so.

examples:
  infertop merge web1.infertop web2.infertop -o incident.infertop
  infertop merge a.infertop b.infertop --offset b.infertop=-0.25 -o all.infertop
  infertop report incident.infertop

exit codes: 2 bad usage (fewer than two inputs, a file given twice, the output is an
            input, an output that cannot be written), 5 an input that is not a readable
            recording (not one, a newer format); a damaged input is used up to the damage,
            with a warning
"""


def add_arguments(p: argparse.ArgumentParser, _agent: AgentConfig | None) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="recordings to merge (two or more)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="recording to write")
    p.add_argument(
        "--offset",
        action="append",
        default=[],
        metavar="FILE=SECONDS",
        help="shift FILE's times by SECONDS (repeatable); default 0: wall clock as recorded",
    )


def run(args: argparse.Namespace) -> int:
    # imported here: the merge (the reader, the writer) loads only when it runs
    from infertop.record.merge import check_paths, merge_recordings, parse_offsets

    check_paths(args.files, args.output)
    res = merge_recordings(args.files, args.output, parse_offsets(args.offset, args.files))
    for r in res.inputs:
        n = len(r.processes)
        print(
            f"infertop: {r.path}: host {r.host or 'unknown'}, {n} process{'es' if n > 1 else ''} "
            f"(pid {', '.join(map(str, r.processes[:6]))}{', ...' if n > 6 else ''}), "
            f"offset {r.offset_s:+.3f} s{' (given by hand)' if r.offset_given else ''}, {r.clock}",
            file=sys.stderr,
        )
        if r.warning:
            print(f"infertop: warning: {r.warning}", file=sys.stderr)
    print(f"infertop: {res.accuracy}", file=sys.stderr)
    print(
        f"infertop: merged {len(res.inputs)} recordings: {res.events:,} events, "
        f"{res.seconds:.1f} s -> {res.output}",
        file=sys.stderr,
    )
    return EXIT_OK


COMMAND = Command(
    "merge",
    "combine recordings from several hosts or services into one",
    add_arguments,
    run,
    description=DESCRIPTION,
    epilog=EPILOG,
    raw_text=True,
)
