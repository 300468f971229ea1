"""What each test costs in CPU, for finding the suite's heavy tests: with
``INFERTOP_TEST_CPU=FILE`` every test appends a line ``nodeid <TAB> cpu_s <TAB> wall_s`` to FILE
(its process's CPU and that of the children it waited for: targets, ``infertop``, py-spy),
``<TAB> start <TAB> worker`` after (the wall clock it began at, the xdist worker that ran it),
from every xdist worker alike. ``python -m tests.cpu_cost FILE`` sums it by file, heaviest first,
and says how long each worker stood idle at the end of its phase.
Off unless asked: nothing is measured or written in a plain run."""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Iterator

import pytest

ENV = "INFERTOP_TEST_CPU"


def _cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    cpu, wall, start = _cpu_s(), time.monotonic(), time.time()
    yield
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    line = f"{item.nodeid}\t{_cpu_s() - cpu:.2f}\t{time.monotonic() - wall:.2f}\t{start:.2f}\t{worker}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write: lines of the workers never interleave
    finally:
        os.close(fd)


def summary(path: str, top: int = 25) -> str:
    by_file: dict[str, list[float]] = {}
    spans: dict[str, list[float]] = {}  # worker: first start, last end
    for row in open(path, encoding="utf-8"):
        nodeid, cpu, wall, start, worker = row.rstrip("\n").split("\t")
        if worker != "main":  # the solo phase runs in pytest's own process
            span = spans.setdefault(worker, [float(start), 0.0])
            span[0], span[1] = min(span[0], float(start)), max(span[1], float(start) + float(wall))
        acc = by_file.setdefault(nodeid.split("::", 1)[0], [0.0, 0.0, 0])
        acc[0] += float(cpu)
        acc[1] += float(wall)
        acc[2] += 1
    total = sum(v[0] for v in by_file.values())
    lines = [f"{total:.0f} CPU-s in {sum(v[2] for v in by_file.values()):.0f} tests", "cpu_s  wall_s  tests  file"]
    for name, (cpu, wall, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{cpu:6.1f} {wall:7.1f} {n:6d}  {name}")
    if spans:  # the phase on workers: how long each stood idle before the last finished
        last = max(end for _, end in spans.values())
        idle = ", ".join(f"{w} {last - end:.0f} s" for w, (_, end) in sorted(spans.items()))
        first = min(begin for begin, _ in spans.values())
        lines.append(f"workers' phase {last - first:.0f} s; idle at its end: {idle}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(sys.argv[1]))
