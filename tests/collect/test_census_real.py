"""The object census from the real agent, armed in a process that leaks into a module-level
list: the census names the list, and what grows says so."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from infertop.analysis.host_memory import growing_objects
from infertop.collect.agent.client import AgentCollector, AgentConfig
from infertop.model.events import TargetInfo
from infertop.model.host_memory import ObjectCensus

pytestmark = pytest.mark.slow

TARGET = """
import sys, time
import infertop.agent
kept = []
path = infertop.agent.arm()
agent = infertop.agent.armed_agent()
# a census each second here (the default: each 10 s), so the test takes seconds
agent._tick_census.__func__.__globals__["CENSUS_EVERY_S"] = 1.0
print(path, flush=True)
start, n = time.monotonic(), 0
while time.monotonic() - start < 120:
    due = int(200 * (time.monotonic() - start))  # 200 items a second, by the clock
    while n < due:
        kept.append(bytes(2000))
        n += 1
    time.sleep(0.01)
"""


def test_the_census_names_the_list_that_grows() -> None:
    child = subprocess.Popen([sys.executable, "-c", TARGET], stdout=subprocess.PIPE, text=True)
    censuses: list[ObjectCensus] = []
    try:
        assert child.stdout is not None
        path = child.stdout.readline().strip()
        target = TargetInfo(child.pid, "python -c leak", "3", None, time.time())
        c = AgentCollector(path, AgentConfig(window_s=0.2, period_s=5.0), target=target)
        c.start()
        try:
            deadline = time.monotonic() + 90
            # what grows is judged over 10 s of censuses or more
            while (
                len(censuses) < 5 or censuses[-1].t - censuses[1].t < 11
            ) and time.monotonic() < deadline:
                censuses += [e for e in c.poll() if isinstance(e, ObjectCensus)]
                time.sleep(0.1)
        finally:
            c.stop()
    finally:
        child.kill()
        child.wait()
    assert len(censuses) >= 5, f"{len(censuses)} censuses"
    assert all(x.pid == 0 and x.objects > 0 and x.cost_s > 0 for x in censuses)
    lists = [
        [n for _k, kind, n, _b, name in x.containers if name == "__main__.kept"] for x in censuses
    ]
    assert lists[-1] and lists[-1][0] > lists[1][0], lists
    got = growing_objects(sorted(censuses, key=lambda x: x.t)[1:])
    # the list grows at 200 items a second by the child's clock; a busy host makes it late,
    # then it catches up: 50 to 800 a second is beyond what load can do to that
    (kept,) = [g for g in got if g.name == "__main__.kept"]
    assert kept.type == "list" and 50 < kept.count_per_s < 800, kept
    assert kept.bytes_per_s is not None and kept.bytes_per_s > 50 * 2000
