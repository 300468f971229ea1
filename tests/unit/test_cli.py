"""The CLI contract: names, flags, exit codes, one clear message and never a traceback.

``main([...])`` runs in this process; the cases that need infertop as a process of its own
(another user, the interpreter's last flush) are in tests/integration/test_cli_process.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator

import pytest

from infertop.cli import build_parser
from infertop.commands import COMMANDS
from infertop.commands.wiring import CollectOptions
from tests.support import data
from tests.support.cli import Ran, run_cli

Infertop = Callable[..., Ran]


@pytest.fixture
def infertop() -> Infertop:
    """``infertop ARGS...`` as a user runs it, in this process: exit code and output."""
    return run_cli


@pytest.fixture(autouse=True)
def _signal_handlers_kept() -> Iterator[None]:
    """main() sets SIGINT/SIGTERM/SIGHUP handlers for its process: give pytest its own back."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = [signal.getsignal(s) for s in sigs]
    yield
    for s, handler in zip(sigs, saved):
        signal.signal(s, handler)


def assert_one_clear_error(p: Ran, code: int, *needles: str) -> None:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert p.stderr.startswith("infertop: ")
    for n in needles:
        assert n in p.stderr, p.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["attach", "1", "--record", "f", "--no-inject", "--rate", "50", "--stage", "a=b", "--stage", "c=d:e"],
        ["run", "--record", "f", "--", "python", "x.py", "--flag"],
        ["record", "1", "-o", "f", "--duration", "3", "--no-inject", "--rate", "10", "--stage", "a=b"],
        ["watch", "1", "2", "--out", "d", "--trigger", "auto", "--trigger", "forward.p99>250ms",
         "--before", "10", "--after", "5", "--cooldown", "30", "--max-incidents", "3",
         "--trigger-window", "4", "--duration", "60", "--stage", "a=b", "--children"],
        ["replay", "f"],
        ["report", "f", "--format", "json"],
        ["report", "f", "--format", "markdown"],
        ["import", "t.json", "-o", "f"],
        ["export", "f", "--format", "chrome", "-o", "o.json.gz"],
        ["export", "f", "--format", "speedscope", "-o", "o.json"],
        ["diff", "a", "b", "--fail-above", "5"],
        ["merge", "a", "b", "-o", "c", "--offset", "b=-0.25"],
        ["demo"],
    ],
)
def test_the_whole_command_table_parses(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.command == argv[0]


def test_the_commands_are_registered_in_the_order_help_lists_them() -> None:
    names = [c.name for c in COMMANDS]
    assert names == ["attach", "run", "record", "watch", "memory-snapshot", "replay", "report",
                     "import", "export", "diff", "merge", "demo"]  # fmt: skip


def test_collect_options_of_a_bare_command_line_are_demos() -> None:
    """demo has no collect flags: it runs with CollectOptions(), which must be what a command
    line giving none of those flags means."""
    for argv in (["attach", "1"], ["record", "1", "-o", "f"], ["run", "--", "x"],
                 ["watch", "1", "--out", "d"]):  # fmt: skip
        assert CollectOptions.from_args(build_parser().parse_args(argv)) == CollectOptions()
    args = build_parser().parse_args(
        ["record", "1", "2", "-o", "f", "--no-inject", "--inject", "--rate", "10", "--stage",
         "a=b", "--config", "c.toml", "--profile-window", "0.5", "--profile-period", "2",
         "--record-shapes", "--profile-memory", "--children"]
    )  # fmt: skip
    assert CollectOptions.from_args(args) == CollectOptions(
        config="c.toml", stages=("a=b",), rate=10.0, inject=False, profile_window=0.5,
        profile_period=2.0, record_shapes=True, profile_memory=True, children=True,
    )  # fmt: skip


def test_help_teaches(infertop: Infertop) -> None:
    p = infertop("--help")
    assert p.returncode == 0
    for word in ("attach", "record", "replay", "report", "demo", "exit codes"):
        assert word in p.stdout


def test_no_command_is_usage(infertop: Infertop) -> None:
    p = infertop()
    assert p.returncode == 2 and p.stderr.startswith("usage: infertop")


def test_bad_flag_is_usage(infertop: Infertop) -> None:
    p = infertop("report")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "the following arguments are required: file" in p.stderr


def test_no_such_pid_is_3(infertop: Infertop) -> None:
    p = infertop("record", "999999", "-o", "/tmp/x.infertop")
    assert_one_clear_error(p, 3, "no process with pid 999999")


@pytest.mark.slow  # starts a child process
def test_non_python_process_is_4(infertop: Infertop, tmp_path) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        p = infertop(
            "record", str(sleeper.pid), "-o", str(tmp_path / "x.infertop"), "--duration", "1"
        )
        assert_one_clear_error(p, 4, "not a Python process")
    finally:
        sleeper.kill()
    assert not (tmp_path / "x.infertop").exists()


def test_corrupt_recording_is_5(infertop: Infertop, tmp_path) -> None:
    f = tmp_path / "bad.infertop"
    f.write_bytes(os.urandom(2048))
    assert_one_clear_error(infertop("report", str(f)), 5, "not an infertop recording")
    assert_one_clear_error(infertop("replay", str(f)), 5)


@pytest.mark.parametrize(
    "argv",
    [
        ["report"],
        ["report", "--format", "json"],
        ["replay"],
        ["export", "--format", "chrome", "-o", "{out}.json.gz"],
        ["export", "--format", "speedscope", "-o", "{out}.speedscope.json"],
        ["export", "--format", "pprof", "-o", "{out}.pb.gz"],
    ],
    ids=["report", "report-json", "replay", "export-chrome", "export-speedscope", "export-pprof"],
)
@pytest.mark.parametrize("size", [100, 12], ids=["cut-to-100-bytes", "header-only"])
def test_a_recording_cut_before_its_first_record_is_5(
    infertop: Infertop, tmp_path, argv: list[str], size: int
) -> None:
    """A real recording cut to 100 bytes (inside its first record, the one naming the target)
    or to its header: `report` printed a report of `pid None` with exit 0. Every command that
    reads it now says it is unreadable: one line, exit 5, no output written."""
    real = data.DATA / "recordings" / "textgen_service.infertop"
    cut = tmp_path / "cut.infertop"
    cut.write_bytes(real.read_bytes()[:size])
    command, *rest = argv
    out = str(tmp_path / "out")
    p = infertop(command, str(cut), *(a.format(out=out) for a in rest))
    assert_one_clear_error(p, 5, "cut.infertop", "unreadable recording")
    assert len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stdout == "" and "pid None" not in p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["cut.infertop"]  # no export written


def test_missing_recording_is_5(infertop: Infertop, tmp_path) -> None:
    p = infertop("report", str(tmp_path / "none.infertop"))
    assert_one_clear_error(p, 5, "no such file")


def test_report_reads_kineto_traces_and_directories_of_ranks(
    infertop: Infertop, repo_root, tmp_path
) -> None:
    import json
    import shutil

    traces = data.TRACES
    p = infertop("report", str(traces / "a100_alexnet_pageable_memcpy.json.gz"), "--format", "json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["source"]["kind"] == "kineto" and rep["gpu"]["available"]
    assert rep["findings"][0]["rule"] == "memcpy-pageable"
    assert {"name", "device", "count", "total_us", "self_us"} <= set(rep["ops"][0])
    text = infertop("report", str(traces / "a100_alexnet_pageable_memcpy.json.gz")).stdout
    assert text.index("findings:") < text.index("top ops")  # findings lead
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for name in ("a100_sampled_rank0", "cpu_only_rank34"):
        shutil.copy(traces / f"{name}.json.gz", ranks)
    rep = json.loads(infertop("report", str(ranks), "--format", "json").stdout)
    assert [r["rank"] for r in rep["ranks"]] == [0, 34]
    assert [p["role"] for p in rep["processes"]] == ["rank 0", "rank 34"]  # as import + report
    md = infertop("report", str(ranks), "--format", "markdown").stdout
    assert md.count("# infertop report") == 1 and "rank 34 (cpu_only_rank34.json.gz)" in md


@pytest.mark.parametrize("content", [b'{"a": 1}', b"[1, 2", b"\x1f\x8b garbage", b""])
def test_bad_traces_are_5(infertop: Infertop, tmp_path, content: bytes) -> None:
    f = tmp_path / "t.json"
    f.write_bytes(content)
    assert_one_clear_error(infertop("report", str(f)), 5)


def test_empty_trace_directory_is_5(infertop: Infertop, tmp_path) -> None:
    assert_one_clear_error(infertop("report", str(tmp_path)), 5, "no .json")


def test_export_and_diff_of_a_missing_file_are_5(infertop: Infertop, tmp_path) -> None:
    missing = str(tmp_path / "nope.infertop")
    p = infertop("export", missing, "--format", "chrome", "-o", str(tmp_path / "o.json"))
    assert_one_clear_error(p, 5, "no such file")
    assert_one_clear_error(infertop("diff", missing, missing), 5, "no such file")


def test_import_of_a_missing_trace_is_5(infertop: Infertop, tmp_path) -> None:
    p = infertop("import", str(tmp_path / "t.json"), "-o", str(tmp_path / "x.infertop"))
    assert_one_clear_error(p, 5, "no such file")


def test_tui_commands_without_a_terminal_say_what_to_do(infertop: Infertop) -> None:
    p = infertop("attach", str(os.getpid()))
    assert_one_clear_error(p, 2, "needs a terminal", "infertop record")


def test_bad_rate_is_usage(infertop: Infertop) -> None:
    p = infertop("record", str(os.getpid()), "-o", "/tmp/x.infertop", "--rate", "0")
    assert_one_clear_error(p, 2, "--rate")


def test_missing_pyspy_says_how_to_get_it(infertop: Infertop, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("INFERTOP_PYSPY", str(tmp_path / "no-py-spy"))
    p = infertop("record", str(os.getpid()), "-o", str(tmp_path / "x.infertop"))
    assert_one_clear_error(p, 2, "py-spy not found")


def test_pyspy_that_fails_is_reported_not_a_traceback(
    infertop: Infertop, tmp_path, monkeypatch
) -> None:
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\necho 'Error: Operation not permitted (os error 1)' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("INFERTOP_PYSPY", str(fake))
    p = infertop("record", str(os.getpid()), "-o", str(tmp_path / "x.infertop"))
    assert_one_clear_error(p, 3, "permission denied", "CAP_SYS_PTRACE")
