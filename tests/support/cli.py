"""``infertop ARGS...`` run in the test's own process (``main([...])``), as a user would see it:
exit code, stdout, stderr. No process is started, so CLI contract tests stay unit tests; the
cases that need infertop as a process of its own are in tests/integration/."""

from __future__ import annotations

import contextlib
import io
import signal
from typing import NamedTuple

from infertop.cli import main


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)  # watch takes USR1
    saved = [signal.getsignal(s) for s in sigs]  # main() sets its process's handlers
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse ends --help and bad usage itself
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        for s, handler in zip(sigs, saved):
            signal.signal(s, handler)
    return Ran(code, out.getvalue(), err.getvalue())
