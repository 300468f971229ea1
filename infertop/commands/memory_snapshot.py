"""``infertop memory-snapshot PID -o FILE``: a CUDA memory snapshot of a running process, in
PyTorch's own format (docs/memory-snapshot.md)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.errors import TargetNotFound, TargetUnsupported, UsageError

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig

DESCRIPTION = """\
Record the CUDA caching allocator's history in a running PyTorch process for a few seconds
(every allocation and free, with its Python stack), then take torch.cuda.memory._snapshot()
there and write it to FILE as PyTorch's own pickle, unchanged: open it at
https://pytorch.org/memory_viz (drag the file in) or with
`python -m torch.cuda._memory_viz trace_plot FILE -o FILE.html`.

The agent is put into the target as for `attach`. While it records, each CUDA allocation
costs the target about 2 us more (PyTorch's figure for Python stacks); recording stops when
the snapshot is taken, or when infertop goes away."""

EPILOG = """\
examples:
  infertop memory-snapshot 4242 -o snap.pickle             10 s of history
  infertop memory-snapshot 4242 -o snap.pickle --seconds 2 one or two requests' worth

exit codes: 0 written; 2 bad arguments or FILE cannot be written; 3 no such process, or no
permission to attach (or it exited meanwhile); 4 the target cannot give one (no CUDA device
in use, no torch, the agent could not be started or failed)."""


def add_arguments(p: argparse.ArgumentParser, agent: AgentConfig | None) -> None:
    p.add_argument("pid", type=int, help="process id of the PyTorch process (it must use CUDA)")
    p.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the snapshot to write (.pickle)"
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        metavar="N",
        help="how long to record the allocator's history first (0-600, default 10; "
        "0: the memory as it is now, without history)",
    )
    p.add_argument(
        "--max-entries",
        type=int,
        default=100_000,
        metavar="K",
        help="the history keeps the last K allocations and frees (default 100000, a few "
        "KB each in the target while it records)",
    )


def run(args: argparse.Namespace) -> int:
    # imported here: the injector and the client load only when this command runs
    from infertop.agent.inject import inject
    from infertop.collect.agent import snapshot
    from infertop.collect.target import PTRACE_HINT, check_pid, pid_alive

    if not 0 <= args.seconds <= 600:
        raise UsageError(f"--seconds {args.seconds:g} is out of range", "use 0 to 600")
    if not 1000 <= args.max_entries <= 1_000_000:
        raise UsageError(f"--max-entries {args.max_entries} is out of range", "use 1000 to 1000000")
    out = os.path.abspath(args.output)
    if not os.path.isdir(os.path.dirname(out)):
        raise UsageError(f"cannot write {args.output}: its folder does not exist")
    if os.path.isdir(out):
        raise UsageError(f"cannot write {args.output}: it is a folder", "name the file to write")
    check_pid(args.pid)

    def say(text: str) -> None:
        print(f"infertop: {text}", file=sys.stderr, flush=True)

    say(f"putting the agent into pid {args.pid}…")
    res = inject(args.pid, timeout=5.0, require_torch=True)
    if not res.ok or not res.socket_path:
        reason = res.reason or "the agent could not be started"
        if res.kind in ("not_found",):
            raise TargetNotFound(reason)
        if res.kind == "denied":
            raise TargetNotFound(reason, PTRACE_HINT)
        raise TargetUnsupported(reason)
    summary = snapshot.take(
        res.socket_path,
        args.pid,
        args.seconds,
        out,
        max_entries=args.max_entries,
        progress=say,
        alive=lambda: pid_alive(args.pid),
    )
    print(f"wrote {args.output}: {snapshot.describe(summary)}")
    print(f"open it at {snapshot.VIEWER}")
    return 0


COMMAND = Command(
    "memory-snapshot",
    "a CUDA memory snapshot of a process, in PyTorch's format",
    add_arguments,
    run,
    description=DESCRIPTION,
    epilog=EPILOG,
    raw_text=True,
)
