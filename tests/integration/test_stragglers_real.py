"""A slow replica of a real service is a straggler finding; equal replicas raise none.

The sample's workers mark their stages with ``infertop.stage`` (``--annotate``), which the
agent injected into each worker times on any Python; ``--slow-worker 2`` makes every forward
pass of worker 2 take longer (a wait, as on a throttled GPU). ``record --children`` compares
the workers' forward calls per 5-s interval (analysis/stragglers.py).
"""

from __future__ import annotations

import pytest

from .helpers import (
    cpu_seconds,
    infertop,
    report_json,
    serving,
    stop_target,
    workers_in_order,
    workers_of,
)

pytestmark = pytest.mark.slow


def _record(tmp_path, *sample_args: str) -> tuple[list[int], dict, list[tuple[float, float]]]:  # noqa: ANN001
    """The workers (by pid), the report, and each worker's seconds on a CPU and waiting for one
    while it was recorded."""
    sample = serving(["samples/multiproc_service.py", "--workers", "2", "--annotate", *sample_args])
    out = str(tmp_path / "replicas.infertop")
    try:
        workers = workers_in_order(sample)  # worker 1, worker 2
        assert sorted(workers) == sorted(workers_of(sample.pid)) and len(workers) == 2
        before = [cpu_seconds(w) for w in workers]
        p = infertop("record", str(sample.pid), "--children", "-o", out, "--duration", "16")
        cpu = [tuple(a - b for a, b in zip(cpu_seconds(w), was)) for w, was in zip(workers, before)]
        assert p.returncode == 0, p.stderr
    finally:
        _, err = stop_target(sample)
    assert err == ""
    return workers, report_json(out), cpu


@pytest.mark.long
def test_a_slow_replica_is_a_straggler(tmp_path) -> None:
    workers, rep, _ = _record(tmp_path, "--slow-worker", "2", "--slowdown", "1.6")
    found = [f for f in rep["findings"] if f["rule"] == "straggler"]
    assert [f["pid"] for f in found] == [workers[1]], found
    ev = found[0]["evidence"]
    assert ev["metric"].startswith("forward call time")
    # a 60 % slowdown shows in (nearly) every interval; beside other tests on 2 cores one of them
    # can come out under the 10 % line (3 of 4 in a fresh-clone run, 2026-12-04)
    compared, slower = ev["intervals_compared"], ev["intervals_slower"]
    assert compared >= 2 and slower >= max(2, 0.75 * compared), ev
    calls = ev["median_call_ms"]
    role = {p["pid"]: p["role"] for p in rep["processes"]}
    # named for what it does, numbered by pid (which need not be the order they started in)
    slow_no, other_no = (2, 1) if workers[1] > workers[0] else (1, 2)
    assert role[workers[1]] == f"inference {slow_no}", role
    slow = calls[f"inference {slow_no} (pid {workers[1]})"]
    assert slow >= 1.5 * calls[f"inference {other_no} (pid {workers[0]})"]
    assert f"inference {slow_no}" in found[0]["title"] and "straggler" in found[0]["title"]


# solo: beside other tests on 2 cores one replica gets less CPU than the other, and its forward
# calls are slower for real (18 % in more than half of the intervals, on a loaded run): a
# straggler of the machine's making, which the rule rightly reports. Beside two CPU hogs even
# alone (54 %): then the kernel's accounting says which replica the machine starved. And with
# their waits equal (3.1 s and 3.2 s of 16, a fresh-clone run beside other work, 2026-12-04)
# one came out 18 % slower a call: the same code, the same requests (the router deals them out
# in turn), on a CPU that did less in its time (a busy sibling thread, a host that took the
# virtual CPU away) -- which shows as more CPU time for the same work
@pytest.mark.solo
def test_equal_replicas_raise_no_straggler(tmp_path) -> None:
    workers, rep, cpu = _record(tmp_path)
    found = [f for f in rep["findings"] if f["rule"] == "straggler"]
    # equal code on unequal CPUs: waited >= 10 % of the 16 s longer, or ran >= 10 % longer for
    # the same requests; a straggler, if any, is the one the machine handicapped
    handicapped = {i for i, (mine, other) in enumerate([(cpu[0], cpu[1]), (cpu[1], cpu[0])])
                   if mine[1] - other[1] > 0.1 * 16 or mine[0] > 1.1 * other[0]}  # fmt: skip
    allowed = [[]] + [[workers[i]] for i in handicapped]
    least_wait = min(wait for _, wait in cpu)
    if least_wait > 0.1 * 16:  # both short of CPU: the machine was busy
        # identical processes side by side on this VM differ by up to 14 %: a straggler of that
        # size is the machine's noise; a slow replica's 60 % is not. Both waiting more than half
        # the time (8.9 s of 16 each beside two CPU hogs and a busy host), a call's time is mostly
        # its turn for a CPU and one replica's calls came out 30 %+ slower: allowed to 50 %
        limit = 0.5 if least_wait > 0.5 * 16 else 0.25
        allowed += [[f["pid"]] for f in found if f["evidence"]["excess"] < limit]
    assert [f["pid"] for f in found] in allowed, (found, cpu)
    # and there was something to compare: the workers' forward calls were timed
    forward = next(s for s in rep["stages"] if s["name"] == "forward")
    assert forward.get("calls", 0) >= 100, forward
