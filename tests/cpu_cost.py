"""What each test costs in CPU, for finding the suite's heavy tests: with
``INFERTOP_TEST_CPU=FILE`` every test appends a line ``nodeid <TAB> cpu_s <TAB> wall_s`` to FILE
(its process's CPU and that of the children it waited for: targets, ``infertop``, py-spy),
from every xdist worker alike. ``python -m tests.cpu_cost FILE`` sums it by file, heaviest first.
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
    cpu, wall = _cpu_s(), time.monotonic()
    yield
    line = f"{item.nodeid}\t{_cpu_s() - cpu:.2f}\t{time.monotonic() - wall:.2f}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write: lines of the workers never interleave
    finally:
        os.close(fd)


def summary(path: str, top: int = 25) -> str:
    by_file: dict[str, list[float]] = {}
    for row in open(path, encoding="utf-8"):
        nodeid, cpu, wall = row.rstrip("\n").rsplit("\t", 2)
        acc = by_file.setdefault(nodeid.split("::", 1)[0], [0.0, 0.0, 0])
        acc[0] += float(cpu)
        acc[1] += float(wall)
        acc[2] += 1
    total = sum(v[0] for v in by_file.values())
    lines = [f"{total:.0f} CPU-s in {sum(v[2] for v in by_file.values()):.0f} tests", "cpu_s  wall_s  tests  file"]
    for name, (cpu, wall, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{cpu:6.1f} {wall:7.1f} {n:6d}  {name}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(sys.argv[1]))
