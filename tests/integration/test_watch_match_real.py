"""``infertop watch --match PATTERN`` on a host: every matching Python process is sampled, the
ones running when watch starts and one started later; the torch one gets the agent; one that
exits is dropped and the rest carry on; each pushes its own series (pid, service_name) to the
stand-in backend; watch itself (whose command line holds the pattern) is never matched; and
nothing of infertop is left in the targets after SIGTERM."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import uuid

import pytest
from support.push_receiver import Receiver

from .helpers import INFERTOP, ROOT, start_target, stop_target, until
from .test_watch_real import Lines, assert_left_nothing

pytestmark = pytest.mark.slow
STAGE_LOOP = ROOT / "tests/integration/targets/stage_loop.py"
SPELL_LOOP = ROOT / "tests/integration/targets/spell_loop.py"


def pushed_pids(rx: Receiver, since: int = 0) -> dict[int, str]:
    """{pid: service_name} of the series in the requests taken from the ``since``-th on."""
    out = {}
    for got in rx.taken()[since:]:
        for labels, _raws in got.series():
            out[int(labels["pid"])] = labels["service_name"]
    return out


def test_watch_match_follows_processes_that_start_and_exit(tmp_path) -> None:
    tag = uuid.uuid4().hex[:8]
    names = {}
    for name, script in (("a", STAGE_LOOP), ("b", STAGE_LOOP), ("torch", SPELL_LOOP)):
        link = tmp_path / f"svc_{tag}_{name}.py"  # a command line only this test's have
        os.symlink(script, link)
        names[name] = str(link)
    a = start_target([names["a"]])
    b = start_target([names["b"]])
    late: subprocess.Popen[str] | None = None
    rx = Receiver().start()
    watch = subprocess.Popen(
        INFERTOP + ["watch", "--match", f"*svc_{tag}_*", "--out", str(tmp_path / "inc"),
                    "--push", rx.url, "--push-interval", "1", "--push-spool", "none", "--json"],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    err = Lines(watch.stderr)
    try:
        until(lambda: {a.pid, b.pid} <= set(pushed_pids(rx)), 60, "both running targets pushed")
        assert pushed_pids(rx)[a.pid] == f"svc_{tag}_a"  # each process its own service name
        # one that starts later, with torch: sampled, and the agent goes in
        late = start_target([names["torch"], "--forward-ms", "20", "--preprocess-ms", "0"])
        until(lambda: late.pid in pushed_pids(rx), 60, "the later target pushed")
        until(lambda: glob.glob(f"/tmp/infertop-*/agent-{late.pid}.sock"), 60,
              "the agent in the torch target")  # fmt: skip
        # one exits: dropped, the others go on
        stop_target(a)
        n = len(rx.taken())
        until(lambda: len(rx.taken()) >= n + 3, 30, "three more pushes")
        after = pushed_pids(rx, n + 1)  # (the first may hold a's last interval)
        assert a.pid not in after and {b.pid, late.pid} <= set(after), after
        watch.send_signal(signal.SIGTERM)
        watch.wait(timeout=60)
        assert watch.returncode == 0, err.text()
        assert_left_nothing(late)
        assert_left_nothing(b)
    finally:
        if watch.poll() is None:
            watch.kill()
        rx.stop()
        for proc in (a, b, late):
            if proc is not None:
                stop_target(proc)
    assert set(pushed_pids(rx)) == {a.pid, b.pid, late.pid}  # never watch itself
    lines = [json.loads(line) for line in err.text().splitlines()]
    end = lines[-1]
    assert end["end"] == "SIGTERM" and end["pid"] is None, end
    assert "2 processes match" in end["watching"] and "1 exited" in end["watching"], end
    assert end["push"]["dropped"] == 0 and end["push"]["sent"] == len(rx.taken())
