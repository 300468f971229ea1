"""``infertop watch``'s command line: its help teaches, a bad rule or an unwritable --out is
one clear usage error before anything attaches."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from tests.support.cli import run_cli


@pytest.fixture(autouse=True)
def _signal_handlers_kept() -> Iterator[None]:
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
    saved = [signal.getsignal(s) for s in sigs]
    yield
    for s, handler in zip(sigs, saved):
        signal.signal(s, handler)


def usage_error(*argv: str) -> str:
    p = run_cli(*argv)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith("infertop: ") and "Traceback" not in p.stderr
    assert p.stderr.count("\n") <= 2  # the message and maybe its hint
    return p.stderr


def test_help_teaches_triggers_signal_and_output() -> None:
    p = run_cli("watch", "--help")
    assert p.returncode == 0
    for needle in ("--out DIR", "--trigger RULE", "forward.p99>250ms", "forward.rate<5/s",
                   "kill -USR1", "--before S", "--after S", "--cooldown S", "--max-incidents N",
                   "incident-<UTC time>.infertop", "--no-inject", "--stage", "examples:"):  # fmt: skip
        assert needle in p.stdout, needle
    assert "watch" in run_cli("--help").stdout


def test_a_bad_rule_is_one_usage_error(tmp_path) -> None:
    err = usage_error("watch", "1", "--out", str(tmp_path / "o"), "--trigger", "forward.p99>>2ms")
    assert "cannot read the trigger 'forward.p99>>2ms'" in err and "'forward.rate<5/s'" in err
    err = usage_error("watch", "1", "--out", str(tmp_path / "o"), "--trigger", "forward.p99>2")
    assert "no unit" in err
    assert not (tmp_path / "o").exists()  # refused before anything was made


@pytest.mark.parametrize(
    "flag, value, says",
    [("--before", "0", "--before 0 is out of range"), ("--after", "-1", "--after -1"),
     ("--trigger-window", "0", "--trigger-window 0"), ("--max-incidents", "0", "at least 1"),
     ("--duration", "0", "--duration must be positive")],
)  # fmt: skip
def test_bad_numbers_are_usage_errors(tmp_path, flag: str, value: str, says: str) -> None:
    assert says in usage_error("watch", "1", "--out", str(tmp_path), flag, value)


def test_an_out_that_cannot_be_made_or_written_is_one_clear_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    err = usage_error("watch", "1", "--out", str(blocker))
    assert f"cannot create --out {blocker}" in err
    err = usage_error("watch", "1", "--out", str(blocker / "below"))
    assert "cannot create --out" in err and "Not a directory" in err
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        assert "cannot write incidents to" in usage_error("watch", "1", "--out", str(ro))


def test_out_is_created_then_the_pid_is_checked(tmp_path) -> None:
    out = tmp_path / "a" / "b"
    p = run_cli("watch", "999999", "--out", str(out))
    assert p.returncode == 3 and "no process with pid 999999" in p.stderr
    assert out.is_dir() and list(out.iterdir()) == []  # the write probe is gone


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "watch needs a PID or --match PATTERN"),
        (["1", "--match", "*serve.py*"], "give pids or --match, not both"),
        (["--match", "*"], "would match every process"),
        (["--match", "/(/"], "not a regular expression"),
    ],
)
def test_match_or_pids_one_usage_error_each(tmp_path, args: list[str], says: str) -> None:
    p = run_cli("watch", *args, "--out", str(tmp_path))
    assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, p.stderr
