"""python-overhead and tiny-ops from a session's torch-profiler windows (the agent's op_time),
at and around their thresholds; the op_time measure itself; its place in recordings."""

from __future__ import annotations

import msgpack
import pytest

from infertop.agent import payload as PL
from infertop.analysis.findings.live import with_findings
from infertop.analysis.session import Session
from infertop.analysis.snapshot import build_snapshot
from infertop.analysis.trace_ops import OP_GAP_US
from infertop.model.events import GpuActivity, KernelStat, OpPath, OpTime, OpWindow
from infertop.record.format import decode_event, encode_event

T0 = 1_790_000_000.0


def window(
    i: int, in_ops_us: float, wall_us: float, ops: int, gpu: bool = False, timed: bool = True
) -> OpWindow:
    """A 0.25 s window whose op thread ran ``ops`` top-level ops for ``in_ops_us`` inside
    stretches of model work ``wall_us`` long."""
    paths = (OpPath(("aten::mul",), "forward", "cpu", ops, in_ops_us, in_ops_us),)
    extra = {}
    if gpu:
        extra = {"kernels": (KernelStat("k", "compute", 10, 500.0, 40.0, 60.0),),
                 "gpu": GpuActivity(500.0, 250_000.0, 1000.0)}  # fmt: skip
    return OpWindow(
        T0 + 10 * i, T0 + 10 * i + 0.25, "agent", ops * 2, False, paths,
        op_time=OpTime(ops, in_ops_us, wall_us) if timed else None, **extra,
    )  # fmt: skip


def rules(*windows: OpWindow) -> dict[str, object]:
    s = Session()
    for w in windows:
        s.apply(w)
    return {f.rule: f for f in with_findings(build_snapshot(s)).findings}


@pytest.mark.parametrize(
    "in_ops_us, wall_us, ops, fires",
    [
        (70_000.0, 100_000.0, 500, True),  # 30 % outside: the threshold
        (71_000.0, 100_000.0, 500, False),  # 29 %
        (40_000.0, 100_000.0, 100, True),  # 60 % with the fewest ops judged
        (40_000.0, 100_000.0, 99, False),  # too few ops to judge
    ],
)
def test_python_overhead_threshold(in_ops_us: float, wall_us: float, ops: int, fires: bool) -> None:
    assert ("python-overhead" in rules(window(0, in_ops_us, wall_us, ops))) is fires


def test_python_overhead_sums_the_windows() -> None:
    # 20 % and 50 % outside over equal walls: 35 % together
    found = rules(window(0, 80_000.0, 100_000.0, 400), window(1, 50_000.0, 100_000.0, 400))
    f = found["python-overhead"]
    assert f.evidence["outside_share"] == pytest.approx(0.35)
    assert f.evidence["top_level_ops"] == 800 and f.severity == "low"
    assert "python-overhead" not in rules(window(0, 80_000.0, 100_000.0, 400))


@pytest.mark.parametrize("mean_us, fires", [(9.9, True), (10.1, False)])
def test_tiny_ops_on_the_cpu(mean_us: float, fires: bool) -> None:
    ops = 5000
    found = rules(window(0, mean_us * ops, 2 * mean_us * ops, ops))  # idle 50 % between ops
    assert ("tiny-ops" in found) is fires
    assert "python-overhead" in found


def test_tiny_ops_cpu_branch_is_not_used_when_the_gpu_worked() -> None:
    assert "tiny-ops" not in rules(window(0, 9_000.0, 20_000.0, 5000, gpu=True))


def test_windows_without_op_time_keep_the_rules_silent_but_copy_heavy_works() -> None:
    w = window(0, 10_000.0, 100_000.0, 1000, timed=False)
    copies = OpPath(("aten::copy_",), "forward", "cpu", 50, 5_000.0, 5_000.0)
    found = rules(OpWindow(w.t_start, w.t_end, "agent", 10, False, w.paths + (copies,)))
    assert "python-overhead" not in found and "tiny-ops" not in found
    assert "copy-heavy" in found  # copies: 5 of 15 ms of op time


def test_copy_heavy_weighs_copies_against_the_same_rows_op_time() -> None:
    """A starved target (under two CPU hogs, the Python-loop sample): its op thread's stretches
    leave out the stops of ops it was preempted in (7.7 ms of op time), its rows keep them
    (85 ms, 13 ms of them a conversion). copy-heavy once read 178 % there; copies over the rows'
    own op time are 15 %."""
    w = window(0, 7_700.0, 16_000.0, 3000)
    rows = (OpPath(("aten::relu",), "forward", "cpu", 200, 72_000.0, 72_000.0),
            OpPath(("aten::add", "aten::to"), "forward", "cpu", 200, 13_000.0, 13_000.0))
    found = rules(OpWindow(w.t_start, w.t_end, "agent", 10, False, rows, op_time=w.op_time))
    assert found["copy-heavy"].evidence["cpu_share_of_forward"] == pytest.approx(13 / 85, abs=1e-3)


def ev(name: str, tid: int, start_us: float, dur_us: float, kind: str = "cpu_op") -> tuple:
    return (kind, name, tid, int(start_us * 1000), int(dur_us * 1000), 0, 0, 0, None)


def test_op_time_groups_top_level_ops_into_stretches_on_the_busiest_thread() -> None:
    events = [
        ev("a", 1, 0, 10), ev("child", 1, 2, 5), ev("b", 1, 30, 10),  # gap 20 µs: one stretch
        ev("c", 1, 3000, 10),  # 2.96 ms later: a new stretch (another stage ran between)
        ev("infertop:preprocess", 1, 1000, 1500, "user_annotation"),  # not an op
        ev("x", 2, 0, 25),  # another thread with less op time
    ]  # fmt: skip
    t = PL.reduce_events(events, 0.0, 0.01)["op_time"]
    assert t == {"tid": 1, "ops": 3, "in_ops_us": 30.0, "wall_us": 50.0}
    assert PL.reduce_events([ev("infertop:x", 1, 0, 5, "user_annotation")], 0.0, 1.0)["op_time"] is None
    assert OP_GAP_US * 1000 == PL.OP_GAP_NS  # the trace report cuts stretches the same way


def test_op_time_travels_in_recordings_and_old_windows_still_read() -> None:
    w = window(0, 70_000.0, 100_000.0, 500)
    raw = msgpack.unpackb(msgpack.packb(encode_event(w)))
    assert decode_event(raw) == w
    # (windows by position before 1.9, 1.1's without op_time: tests/unit/test_ops_format.py)
    with pytest.raises(ValueError):
        decode_event([raw[0], {**raw[1], "op_time": [1, 2]}])


def test_op_time_does_not_count_a_stopped_thread_as_op_time() -> None:
    """100 tiny ops 2 µs apart; one of them lasts 4 ms (the thread was stopped inside it):
    it counts at its name's median, and the stop leaves the stretch, as a long gap would."""
    events, t = [], 0.0
    for i in range(100):
        dur = 4000.0 if i == 50 else 1.0
        events.append(ev("aten::mul", 1, t, dur))
        t += dur + 2.0
    got = PL.reduce_events(events, 0.0, 0.01)["op_time"]
    assert got["ops"] == 100
    assert got["in_ops_us"] == pytest.approx(100.0)  # 100 calls at 1 µs
    assert got["wall_us"] == pytest.approx(100.0 + 99 * 2.0)
    # a name whose calls are all long is real work, not a stop
    slow = [ev("aten::mm", 1, i * 5002.0, 5000.0) for i in range(10)]
    assert PL.reduce_events(slow, 0.0, 0.1)["op_time"]["in_ops_us"] == pytest.approx(50_000.0)


def test_op_time_keeps_device_waits_as_op_time() -> None:
    """A GPU-bound loop: 1 ms of launches, then ``aten::item`` waits 20 ms for the device. The
    wait is op time (the thread waits inside torch), so the loop is not Python overhead; and
    where a device is profiled no long op is taken for a stopped thread."""
    events, t = [], 0.0
    for _step in range(20):
        for _ in range(10):
            events.append(ev("aten::mm", 1, t, 70.0))
            t += 100.0
        events.append(ev("aten::item", 1, t, 5.0 if _step % 4 else 20_000.0))
        t += 20_010.0
    got = PL.reduce_events(events, 0.0, 1.0, device_profiled=False)["op_time"]
    assert got["in_ops_us"] >= 5 * 20_000.0  # the waits are inside ops
    on_gpu, t = [], 0.0
    for i in range(50):
        dur = 900.0 if i % 10 else 30_000.0
        on_gpu.append(ev("aten::mm", 1, t, dur))
        t += dur + 100.0
    got = PL.reduce_events(on_gpu, 0.0, 1.0, device_profiled=True)["op_time"]
    assert got["in_ops_us"] == pytest.approx(45 * 900.0 + 5 * 30_000.0)


def test_op_thread_cpu_is_the_op_thread_s_kernel_count_over_the_window() -> None:
    op = {"tid": 7, "ops": 10, "in_ops_us": 1.0, "wall_us": 2.0}
    PL.op_thread_cpu(op, {7: (1_000_000, 50_000), 8: (0, 0)}, {7: (3_000_000, 2_050_000), 8: (9, 9)})
    assert (op["run_us"], op["wait_us"]) == (2000.0, 2000.0)
    for start, end in (({}, {7: (1, 1)}), ({7: (5, 5)}, {}), ({7: (5, 5)}, {7: (4, 9)})):
        kept = {"tid": 7, "ops": 1}
        PL.op_thread_cpu(kept, start, end)  # no reading, or one that went back: nothing said
        assert kept == {"tid": 7, "ops": 1}
    PL.op_thread_cpu(None, {}, {})  # a window without CPU ops


def starved(w: OpWindow, rows: tuple[OpPath, ...], run_us: float, wait_us: float) -> OpWindow:
    t = w.op_time
    assert t is not None
    return OpWindow(w.t_start, w.t_end, "agent", 10, False, rows,
                    op_time=OpTime(t.ops, t.in_ops_us, t.wall_us, run_us, wait_us))  # fmt: skip


@pytest.mark.parametrize("wait_us, says", [(24_000.0, False), (25_000.0, True), (60_000.0, True)])
def test_op_timing_rules_say_when_the_op_thread_waited_for_a_cpu(wait_us: float, says: bool) -> None:
    """A healthy service beside two CPU hogs read copy-heavy (14 % of forward; 2-3 % alone): its
    op thread waited for a CPU 56 % of its runnable time, and a stop inside a copy is copy time.
    From a quarter of the runnable time waited, copy-heavy, python-overhead and the CPU-only
    tiny-ops say so, low."""
    w = window(0, 50_000.0, 100_000.0, 500)  # 50 % outside ops: python-overhead, medium
    rows = w.paths + (OpPath(("aten::clone",), "forward", "cpu", 50, 25_000.0, 25_000.0),)  # 33 %
    found = rules(starved(w, rows, 100_000.0 - wait_us, wait_us))
    for rule, alone in (("copy-heavy", "medium"), ("python-overhead", "medium")):  # alone
        f = found[rule]
        assert f.severity == ("low" if says else alone)
        assert ("waited for a CPU" in f.title) is says
        assert f.evidence.get("op_thread_waited_for_cpu") == (round(wait_us / 100_000.0, 3) if says else None)
    tiny = window(0, 4_500.0, 10_000.0, 500)  # 9 µs ops, the timeline idle 55 % of the time
    f = rules(starved(tiny, tiny.paths, 10_000.0 - wait_us / 10, wait_us / 10))["tiny-ops"]  # CPU-only
    assert (f.severity, "op_thread_waited_for_cpu" in f.evidence) == (("low", True) if says else ("medium", False))
    alone = OpWindow(w.t_start, w.t_end, "agent", 10, False, rows, op_time=w.op_time)
    assert rules(alone)["copy-heavy"].severity == "medium"  # no kernel count: as it was


def test_the_op_thread_s_cpu_times_travel_in_recordings() -> None:
    w = window(0, 70_000.0, 100_000.0, 500)
    timed = starved(w, w.paths, 80_000.0, 20_000.0)
    raw = msgpack.unpackb(msgpack.packb(encode_event(timed)))
    assert decode_event(raw) == timed and decode_event(raw).op_time.wait_us == 20_000.0
    assert decode_event(msgpack.unpackb(msgpack.packb(encode_event(w)))).op_time.run_us is None
