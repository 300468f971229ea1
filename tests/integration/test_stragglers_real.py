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


# solo: two equal replicas' speeds are compared, and beside other tests one of them can run on a
# CPU that does less in its time (a busy sibling thread, a host that takes the virtual CPU
# away): slower for real in a way the kernel's counts do not show. Where it shows (one replica
# waited for a CPU more than the other), the rule leaves it to cpu-starved (analysis/stragglers.py, host_s_doing; tests/unit/test_stragglers_calls.py)
@pytest.mark.solo
def test_equal_replicas_raise_no_straggler(tmp_path) -> None:
    workers, rep, cpu = _record(tmp_path)
    found = [f for f in rep["findings"] if f["rule"] == "straggler"]
    assert found == [], (found, cpu)
    # and there was something to compare: the workers' forward calls were timed
    forward = next(s for s in rep["stages"] if s["name"] == "forward")
    assert forward.get("calls", 0) >= 100, forward
