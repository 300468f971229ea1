"""``record --push`` and ``watch --push`` on a real target (targets/stage_loop.py) into the
stand-in backend (tests/support/push_receiver.py): a profile per interval with the series
labels a backend queries by, pprofs that ``go tool pprof`` reads whose samples add up to the
recording's and whose stage labels give the report's forward share, counted in ``--json``; a backend that is down at
first gets every profile once it is up, and nothing of infertop is left in the target."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess

import pytest
from support.go_pprof import needs_go, traces
from support.push_receiver import Receiver

from .helpers import INFERTOP, ROOT, infertop, report_json, start_target, stop_target, until

pytestmark = [pytest.mark.slow, needs_go]
STAGE_LOOP = str(ROOT / "tests/integration/targets/stage_loop.py")


def _profiles(rx: Receiver, tmp_path, pid: int) -> list[str]:
    """Every taken request's one series, checked; the paths of its pprofs, written out."""
    paths = []
    for i, got in enumerate(rx.taken()):
        assert got.path == "/push.v1.PusherService/Push"
        ((labels, raws),) = got.series()
        assert labels == {
            "__name__": "process_cpu", "service_name": "stage_loop", "host": socket.gethostname(),
            "pid": str(pid), "env": "ci",
        }  # fmt: skip
        path = tmp_path / f"push{i}.pb.gz"
        path.write_bytes(raws[0])
        paths.append(str(path))
    return paths


def test_record_push_sends_stage_labelled_profiles_that_add_up_to_the_recording(tmp_path) -> None:
    target = start_target([STAGE_LOOP])
    out = str(tmp_path / "r.infertop")
    try:
        with Receiver().start() as rx:
            p = infertop("record", str(target.pid), "-o", out, "--duration", "7", "--no-inject",
                         "--push", rx.url, "--push-interval", "2", "--push-label", "env=ci",
                         "--push-spool", str(tmp_path / "spool"), "--json")  # fmt: skip
            assert p.returncode == 0, p.stderr
            paths = _profiles(rx, tmp_path, target.pid)
    finally:
        stop_target(target)
    assert len(paths) >= 3, p.stderr  # 7 s in 2 s intervals, and the last part one
    lines = [json.loads(line) for line in p.stderr.splitlines()]  # --json: every line is JSON
    assert "push" in lines[0] and lines[-1]["end"] == "duration reached", lines
    end = lines[-1]["push"]
    assert (end["sent"], end["intervals"], end["dropped"]) == (len(paths), len(paths), 0), end
    assert end["sent_bytes"] == sum(len(g.body) for g in rx.taken())
    rep = report_json(out)
    every = traces(paths[0], "-sample_index=samples", "-tagignore=stage=idle", *paths[1:])
    total = sum(v for _l, v, _f in every)
    assert total == rep["sampling"]["samples"], (total, rep["sampling"])  # none lost, none twice
    forward = traces(paths[0], "-sample_index=samples", "-tagfocus=stage=forward", *paths[1:])
    (fwd,) = [st for st in rep["stages"] if st["name"] == "forward"]
    assert sum(v for _l, v, _f in forward) / total == pytest.approx(fwd["cpu_share"], abs=0.01)
    assert all(frames[0].startswith("forward") or "forward" in " ".join(frames)
               for _l, _v, frames in forward)  # fmt: skip


def test_watch_push_spools_while_the_backend_is_down_and_sends_it_all_when_it_is_up(
    tmp_path,
) -> None:
    target = start_target([STAGE_LOOP])
    rx = Receiver.reserved()
    watch = subprocess.Popen(
        INFERTOP + ["watch", str(target.pid), "--out", str(tmp_path / "inc"), "--no-inject",
                    "--push", rx.url, "--push-interval", "1", "--push-label", "env=ci",
                    "--push-spool", str(tmp_path / "spool")],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        spool = tmp_path / "spool"
        # refused: the profiles wait on disk
        until(lambda: len([f for _d, _s, fs in os.walk(spool) for f in fs if f.endswith(".push")])
              >= 2, 60, "two profiles spooled while the backend is down")  # fmt: skip
        rx.start()
        rx.wait_taken(4, 60)
        watch.send_signal(signal.SIGTERM)
        _out, err = watch.communicate(timeout=60)
        assert watch.returncode == 0, err
        paths = _profiles(rx, tmp_path, target.pid)
    finally:
        if watch.poll() is None:
            watch.kill()
        rx.stop()
        out, target_err = stop_target(target)
    assert "does not answer (connection refused); profiles wait in the spool" in err, err
    assert "answers again" in err, err
    sent = int(err.rsplit("pushed ", 1)[1].split(" of ", 1)[0])
    assert sent == len(paths) and f"pushed {sent} of {sent} profiles" in err, err
    assert not [f for _d, _s, fs in os.walk(spool) for f in fs if f.endswith(".push")]
    assert all(traces(p, "-sample_index=samples") for p in paths)
    assert "infertop" not in target_err  # nothing of infertop in the target's output
