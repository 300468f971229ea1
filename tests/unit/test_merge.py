"""`infertop merge`: recordings from several hosts become one, and every way it can go wrong
is one line and the right exit code (docs/failure-matrix.md).

The inputs are real: recordings imported from the real torch.profiler traces of
tests/data/traces (tests/integration/test_merge_real.py merges real py-spy recordings)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from infertop.config import Config
from infertop.model.events import Marker, OpWindow, ProcessDef, ThreadDef
from infertop.record.format import HEADER, MAGIC
from infertop.record.merge import merge_recordings
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from tests.support.cli import Ran, run_cli
from tests.support.kineto_ranks import trace


def run(*args: str) -> Ran:
    return run_cli(*args)  # in this process: main([...])


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("merge")
    out = []
    for name in ("a100_alexnet_pageable_memcpy", "a100_sampled_rank0"):
        p = d / f"{name}.infertop"
        r = run("import", str(trace(name)), "-o", str(p))
        assert r.returncode == 0, r.stderr
        out.append(p)
    return out[0], out[1]


def one_line_error(p: Ran, code: int, needle: str) -> None:
    assert p.returncode == code, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and p.stderr.startswith("infertop: "), p.stderr
    assert needle in p.stderr.splitlines()[0], p.stderr


def test_every_input_is_a_process_on_one_timeline(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = inputs
    out = tmp_path / "all.infertop"
    p = run("merge", str(a), str(b), "-o", str(out))
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert lines[0].startswith(f"infertop: {a}: host unknown, 1 process (pid ")
    assert "offset +0.000 s" in lines[0] and "no clock anchor (an older recording)" in lines[0]
    assert "accuracy unknown" in p.stderr and f"-> {out}" in lines[-1]
    events = read_recording(str(out)).events
    procs = [e for e in events if isinstance(e, ProcessDef)]
    assert len(procs) == 2 and {e.pid for e in procs} == {2869224, 4037}  # the traces' own pids
    windows = [e for e in events if isinstance(e, OpWindow)]
    assert {w.pid for w in windows} == {2869224, 4037}
    times = [w.t_end for w in windows]
    assert times == sorted(times)
    inputs_ = [m for m in events if isinstance(m, Marker) and m.text == "merged input"]
    assert sorted(m.extra["input"] for m in inputs_) == sorted([str(a.resolve()), str(b.resolve())])
    src = ReplaySource(read_recording(str(out)), Config())  # replay loads and seeks it
    src.seek(src.length / 2)
    src.seek(src.length)
    assert len(src.session.op_windows) == len(windows)
    rep = json.loads(run("report", str(out), "--format", "json").stdout)
    assert {p["pid"] for p in rep["processes"]} == {2869224, 4037}
    assert all(p["ops"]["windows"] > 0 for p in rep["processes"])
    pageable = [f for f in rep["findings"] if f["rule"] == "memcpy-pageable"]
    assert pageable and pageable[0]["pid"] is None  # of every process merged


def test_colliding_pids_and_tids_are_renamed_and_an_offset_moves_an_input(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    a, _ = inputs
    twin = tmp_path / "twin.infertop"
    shutil.copy(a, twin)  # the same process, as if recorded on a second host
    out = tmp_path / "all.infertop"
    res = merge_recordings([str(a), str(twin)], str(out), {1: 5.0})
    first, second = res.inputs
    assert first.processes == (2869224,) and second.processes[0] != 2869224
    events = read_recording(str(out)).events
    threads = [e for e in events if isinstance(e, ThreadDef)]
    assert len({t.tid for t in threads}) == len(threads)
    assert {t.pid for t in threads} == {2869224, second.processes[0]}
    w0 = [w for w in events if isinstance(w, OpWindow) and w.pid == 2869224]
    w1 = [w for w in events if isinstance(w, OpWindow) and w.pid == second.processes[0]]
    assert len(w0) == len(w1)
    assert all(y.t_start - x.t_start == pytest.approx(5.0) for x, y in zip(w0, w1))
    p = run("merge", str(a), str(twin), "--offset", f"{twin}=5", "-o", str(tmp_path / "o.infertop"))
    assert p.returncode == 0 and "offset +5.000 s" in p.stderr.splitlines()[1], p.stderr


def test_a_damaged_input_is_used_up_to_the_damage(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = inputs
    cut = tmp_path / "cut.infertop"
    data = b.read_bytes()
    cut.write_bytes(data[: len(data) - 100])
    out = tmp_path / "all.infertop"
    p = run("merge", str(a), str(cut), "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert "warning:" in p.stderr and "cut short" in p.stderr and "Traceback" not in p.stderr
    assert run("report", str(out)).returncode == 0


def test_bad_merges_are_one_line_and_the_right_exit_code(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = inputs
    out = str(tmp_path / "o.infertop")
    one_line_error(run("merge", str(a), "-o", out), 2, "at least two recordings")
    one_line_error(run("merge", str(a), str(a), "-o", out), 2, "is given twice")
    link = tmp_path / "link.infertop"
    link.symlink_to(a)
    one_line_error(run("merge", str(a), str(link), "-o", out), 2, "is given twice")
    one_line_error(run("merge", str(a), str(b), "-o", str(b)), 2, "is one of the inputs")
    one_line_error(run("merge", str(a), str(b), "-o", str(tmp_path / "no" / "o.infertop")), 2, "cannot write")
    one_line_error(run("merge", str(a), str(b), "--offset", "x=1", "-o", out), 2, "not one of the recordings")
    one_line_error(run("merge", str(a), str(b), "--offset", f"{a}=soon", "-o", out), 2, "not FILE=SECONDS")
    newer = tmp_path / "newer.infertop"
    newer.write_bytes(HEADER.pack(MAGIC, 9, 0) + a.read_bytes()[HEADER.size :])
    one_line_error(run("merge", str(a), str(newer), "-o", out), 5, "newer than this infertop reads")
    junk = tmp_path / "junk.infertop"
    junk.write_bytes(b"not a recording at all")
    one_line_error(run("merge", str(a), str(junk), "-o", out), 5, "is not an infertop recording")
    one_line_error(run("merge", str(a), str(tmp_path / "none.infertop"), "-o", out), 5, "no such file")
    assert not Path(out).exists()


def test_help_teaches_the_clock() -> None:
    p = run("merge", "--help")
    assert p.returncode == 0
    for needle in ("--offset FILE=SECONDS", "maxerror", "synchronised", "examples:", "exit codes"):
        assert needle in p.stdout
