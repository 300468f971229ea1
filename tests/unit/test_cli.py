"""The CLI contract: names, flags, exit codes, one clear message and never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from infertop.cli import build_parser
from tests.support import data

INFERTOP = [sys.executable, "-m", "infertop"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        INFERTOP + list(args), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def assert_one_clear_error(p: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
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
        ["replay", "f"],
        ["report", "f", "--format", "json"],
        ["report", "f", "--format", "markdown"],
        ["import", "t.json", "-o", "f"],
        ["export", "f", "--format", "chrome", "-o", "o.json.gz"],
        ["export", "f", "--format", "speedscope", "-o", "o.json"],
        ["diff", "a", "b", "--fail-above", "5"],
        ["demo"],
    ],
)
def test_the_whole_command_table_parses(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.command == argv[0]


def test_help_teaches() -> None:
    p = run("--help")
    assert p.returncode == 0
    for word in ("attach", "record", "replay", "report", "demo", "exit codes"):
        assert word in p.stdout


def test_no_command_is_usage() -> None:
    assert run().returncode == 2


def test_bad_flag_is_usage() -> None:
    p = run("report")
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_no_such_pid_is_3() -> None:
    assert_one_clear_error(run("record", "999999", "-o", "/tmp/x.infertop"), 3, "no process with pid 999999")


def test_non_python_process_is_4(tmp_path) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        p = run("record", str(sleeper.pid), "-o", str(tmp_path / "x.infertop"), "--duration", "1")
        assert_one_clear_error(p, 4, "not a Python process")
    finally:
        sleeper.kill()
    assert not (tmp_path / "x.infertop").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run infertop as another user")
def test_other_users_process_is_3_with_a_hint() -> None:
    """infertop run as user 'nobody' against a process of root's: refused, with the way out."""
    import shutil

    if shutil.which("setpriv") is None:
        pytest.skip("setpriv missing")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    env = {**os.environ, "HOME": "/tmp"}
    probe = subprocess.run([*as_nobody, *INFERTOP, "--version"], capture_output=True, env=env)
    if probe.returncode != 0:
        pytest.skip("user 'nobody' cannot run this checkout's interpreter (private directory)")
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        p = subprocess.run(
            [*as_nobody, *INFERTOP, "record", str(target.pid), "-o", "/tmp/nobody.infertop"],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
    finally:
        target.kill()
    assert_one_clear_error(p, 3, "permission denied", "CAP_SYS_PTRACE")


def test_corrupt_recording_is_5(tmp_path) -> None:
    f = tmp_path / "bad.infertop"
    f.write_bytes(os.urandom(2048))
    assert_one_clear_error(run("report", str(f)), 5, "not an infertop recording")
    assert_one_clear_error(run("replay", str(f)), 5)


def test_missing_recording_is_5(tmp_path) -> None:
    assert_one_clear_error(run("report", str(tmp_path / "none.infertop")), 5, "no such file")


def test_report_reads_kineto_traces_and_directories_of_ranks(repo_root, tmp_path) -> None:
    import json
    import shutil

    traces = data.TRACES
    p = run("report", str(traces / "a100_alexnet_pageable_memcpy.json.gz"), "--format", "json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["source"]["kind"] == "kineto" and rep["gpu"]["available"]
    assert rep["findings"][0]["rule"] == "memcpy-pageable"
    assert {"name", "device", "count", "total_us", "self_us"} <= set(rep["ops"][0])
    text = run("report", str(traces / "a100_alexnet_pageable_memcpy.json.gz")).stdout
    assert text.index("findings:") < text.index("top ops")  # findings lead
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for name in ("a100_sampled_rank0", "cpu_only_rank34"):
        shutil.copy(traces / f"{name}.json.gz", ranks)
    rep = json.loads(run("report", str(ranks), "--format", "json").stdout)
    assert [r["rank"] for r in rep["ranks"]] == [0, 34]
    assert [p["role"] for p in rep["processes"]] == ["rank 0", "rank 34"]  # as import + report
    md = run("report", str(ranks), "--format", "markdown").stdout
    assert md.count("# infertop report") == 1 and "rank 34 (cpu_only_rank34.json.gz)" in md


@pytest.mark.parametrize("content", [b'{"a": 1}', b"[1, 2", b"\x1f\x8b garbage", b""])
def test_bad_traces_are_5(tmp_path, content: bytes) -> None:
    f = tmp_path / "t.json"
    f.write_bytes(content)
    assert_one_clear_error(run("report", str(f)), 5)


def test_empty_trace_directory_is_5(tmp_path) -> None:
    assert_one_clear_error(run("report", str(tmp_path)), 5, "no .json")


def test_export_and_diff_of_a_missing_file_are_5(tmp_path) -> None:
    missing = str(tmp_path / "nope.infertop")
    assert_one_clear_error(run("export", missing, "--format", "chrome", "-o", str(tmp_path / "o.json")), 5, "no such file")
    assert_one_clear_error(run("diff", missing, missing), 5, "no such file")


def test_import_of_a_missing_trace_is_5(tmp_path) -> None:
    p = run("import", str(tmp_path / "t.json"), "-o", str(tmp_path / "x.infertop"))
    assert_one_clear_error(p, 5, "no such file")


def test_tui_commands_without_a_terminal_say_what_to_do() -> None:
    p = run("attach", str(os.getpid()))
    assert_one_clear_error(p, 2, "needs a terminal", "infertop record")


def test_bad_rate_is_usage() -> None:
    p = run("record", str(os.getpid()), "-o", "/tmp/x.infertop", "--rate", "0")
    assert_one_clear_error(p, 2, "--rate")


def test_missing_pyspy_says_how_to_get_it(tmp_path) -> None:
    env = {**os.environ, "INFERTOP_PYSPY": str(tmp_path / "no-py-spy")}
    p = subprocess.run(
        INFERTOP + ["record", str(os.getpid()), "-o", str(tmp_path / "x.infertop")],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert_one_clear_error(p, 2, "py-spy not found")


def test_pyspy_that_fails_is_reported_not_a_traceback(tmp_path) -> None:
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\necho 'Error: Operation not permitted (os error 1)' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {**os.environ, "INFERTOP_PYSPY": str(fake)}
    p = subprocess.run(
        INFERTOP + ["record", str(os.getpid()), "-o", str(tmp_path / "x.infertop")],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert_one_clear_error(p, 3, "permission denied", "CAP_SYS_PTRACE")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_report_into_a_full_disk_is_one_line(repo_root, fmt: str) -> None:
    """``infertop report X > file`` on a full disk: one line and exit 2, not an internal error."""
    trace = data.trace("a100_alexnet_pageable_memcpy.json.gz")
    with open("/dev/full", "w") as full:
        p = subprocess.run(INFERTOP + ["report", str(trace), "--format", fmt], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    assert_one_clear_error(p, 2, "cannot write the output", "No space left")
    assert len(p.stderr.strip().splitlines()) == 1
