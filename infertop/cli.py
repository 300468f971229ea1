"""Command line: the parser built from the registered commands (``infertop/commands/``), one
dispatch, and every error turned into one message and an exit code."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from collections.abc import Sequence

from infertop import __version__
from infertop.commands import BY_NAME, COMMANDS
from infertop.commands.common import agent_defaults
from infertop.errors import EXIT_OK, EXIT_USAGE, InfertopError

EPILOG = """\
examples:
  infertop demo                          live UI on the bundled sample service
  infertop attach 4242                   live UI on a running Python process
  infertop record 4242 -o incident.infertop --duration 60
  infertop watch 4242 --out incidents/   write incidents/incident-*.infertop when a stage slows
  infertop replay incident.infertop      the same UI on a recording
  infertop report incident.infertop --format json
  infertop merge web1.infertop web2.infertop -o all.infertop   several hosts, one timeline

exit codes: 0 ok, 1 diff regression, 2 bad usage, 3 target not found / no permission,
            4 target unsupported, 5 unreadable input file
"""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``command`` (when known) spares the others' agent defaults:
    only the collecting commands' parsers name them, and the file commands would pay ~25 ms
    of start-up to import them."""
    shown = command is None or (command in BY_NAME and BY_NAME[command].collecting)
    defaults = agent_defaults() if shown else None
    parser = argparse.ArgumentParser(
        prog="infertop",
        description="See where a running PyTorch inference process spends its time: tokenizer, "
        "batching queue, model forward, host-device syncs, postprocessing, serialization.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"infertop {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS:
        p = sub.add_parser(
            cmd.name,
            help=cmd.help,
            description=cmd.description,
            epilog=cmd.epilog,
            formatter_class=(
                argparse.RawDescriptionHelpFormatter if cmd.raw_text else argparse.HelpFormatter
            ),
        )
        cmd.add_arguments(p, defaults if cmd.collecting else None)
    return parser


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _drop_stdout() -> None:
    """After a failed write to stdout: point it at /dev/null so that the interpreter's final
    flush of what is still buffered does not fail a second time at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(next((w for w in words if not w.startswith("-")), None))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    for sig in (signal.SIGTERM, signal.SIGHUP):  # close recordings and children on the way out
        signal.signal(sig, _interrupt)
    # Ctrl-C / kill -INT stops `record` and writes the recording even where infertop was started
    # with SIGINT ignored (a script's background job: `infertop record ... &`), which Python
    # would otherwise keep
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc = BY_NAME[args.command].run(args)
        sys.stdout.flush()  # a full disk behind a redirect shows here, not after we return
        return rc
    except InfertopError as exc:
        if args.debug:
            raise
        print(f"infertop: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug: one line, not a traceback, unless --debug
        if args.debug:
            raise
        no_room = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
        if isinstance(exc, OSError) and exc.errno in no_room:
            _drop_stdout()  # not a bug: the output has nowhere to go
            print(f"infertop: cannot write the output: {exc.strerror}", file=sys.stderr)
            return EXIT_USAGE
        print(
            f"infertop: internal error: {type(exc).__name__}: {exc} (run with --debug for details)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
