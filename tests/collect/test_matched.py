"""``watch --match``'s finder on real processes: a glob or /regex/ on the command line, only
Python processes, never an infertop (whose command line holds the pattern too), an exited one
dropped when its sampler says so."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

from infertop.collect.matched import MatchedTargets, Pattern, is_infertop
from infertop.model.events import TargetExited


def test_patterns_and_infertop_itself() -> None:
    glob, regex = Pattern("*serve.py*"), Pattern("/uvicorn .*app:api/")
    assert glob.matches("python /srv/serve.py --port 8000")
    assert not glob.matches("python /srv/train.py")
    assert regex.matches("/venv/bin/python /venv/bin/uvicorn main:app:api --workers 2")
    assert not regex.matches("uvicorn other:app")
    assert is_infertop("/venv/bin/infertop watch --match *serve.py*")
    assert is_infertop("python3 -m infertop watch --match *serve.py*")
    assert not is_infertop("python serve.py --name infertop")


def test_scan_finds_matching_python_processes_and_drops_exited_ones() -> None:
    tag = uuid.uuid4().hex[:8]
    code = "import time; time.sleep(120)"
    py = subprocess.Popen([sys.executable, "-c", code, f"svc-{tag}"])
    other = subprocess.Popen([sys.executable, "-c", code, f"other-{tag}"])
    shell = subprocess.Popen(["sleep", "120", f"svc-{tag}"])  # matches, but is not Python
    try:
        m = MatchedTargets(Pattern(f"*svc-{tag}*"), 50.0, 1.0)
        deadline = time.monotonic() + 20
        while py.pid not in m.pids:  # its interpreter comes up (libpython or the exe mapped)
            assert time.monotonic() < deadline, m.pids
            m.scan()
            time.sleep(0.1)
        assert m.pids == [py.pid] and other.pid not in m.pids and shell.pid not in m.pids
        assert m.scan() == []  # found once
        status = m._summary()
        assert status is not None and f"1 process matches '*svc-{tag}*'" in status.message
        # its sampler says it exited: dropped
        m._spies[py.pid]._events.put(TargetExited(time.time(), "gone"))
        out = m.poll()
        assert m.pids == [] and m.exited == 1
        assert any(getattr(e, "text", "") == f"process {py.pid} exited" for e in out), out
    finally:
        for p in (py, other, shell):
            p.kill()
            p.wait()
