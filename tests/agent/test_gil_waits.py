"""The agent's late wake-ups split between the host's CPU and the GIL, and the GIL's part kept
only where the target's own threads waited (agent/payload/callsamples.py: ``_note_sleep``,
``_note_wake``, ``late_wake_parts``), then through the host to ``gil-contention``.

The wake-ups below were measured on this 2-core machine (Python 3.12, the agent's poll loop at
100 Hz beside the threads named): how late the agent's thread woke, how much its run-queue delay
(``/proc/self/task/TID/schedstat``) grew meanwhile, how many of the target's Python threads ran
(their CPU clocks) and their CPU time together. The slow tests measure instead: in this process,
and with the agent injected into ``targets/pauses_target.py`` on Python 3.8 and 3.12.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from infertop.agent.payload import callsamples
from infertop.agent.payload.callsamples import _CallSamplerMixin, late_wake_parts, stack_of
from infertop.agent.payload.constants import DEFAULT_CONFIG
from infertop.analysis.findings import RULES, FindingInput
from infertop.analysis.session import Session
from infertop.analysis.session_tails import session_pauses
from infertop.collect.agent.client import convert
from infertop.config import FindingThresholds

# (late s, the agent's run-queue delay s, the target's threads that ran, their CPU s)
#: one thread, a json.dumps that keeps the GIL ~11 ms (a tokenize -> forward -> serialize loop)
SINGLE = (0.0106, 0.0, 1, 0.0111)
#: a thread in the builtin sum over a range (~50 ms keeping the GIL) and a main thread that
#: wakes from its sleeps and waits for it
HOG_AND_MAIN = (0.0274, 0.0003, 2, 0.0312)
#: two threads spinning in Python, taking turns at the 5 ms switch interval
TWO_SPINNING = (0.0215, 0.0022, 2, 0.0265)
#: a light target on a host whose CPUs four busy processes took: the agent waited for a CPU
HOST_BUSY = (0.0175, 0.0172, 1, 0.00003)
#: the json.dumps thread on that busy host: it held the GIL 41 ms, running 12 ms of them
HOST_BUSY_HOLDER = (0.0639, 0.0230, 1, 0.0116)


@pytest.mark.parametrize(
    "wake,cpu,gil",
    [
        (SINGLE, 0.0, 0.0),  # nobody of the target's waited: the agent alone did
        (HOG_AND_MAIN, 0.0, 0.0271),
        (TWO_SPINNING, 0.0, 0.0193),
        (HOST_BUSY, 0.01747, 0.0),
        # the holder kept the agent waiting 41 ms, but ran 12 of them: 29 more for a CPU
        (HOST_BUSY_HOLDER, 0.0523, 0.0),
        # two threads, but the GIL's holder ran 5 ms of the 41: the rest it waited for a CPU
        ((0.0639, 0.0230, 2, 0.0050), 0.0589, 0.0),
        # a run-queue delay that is not known (no schedstat): all of it is the GIL's
        ((0.0274, None, 2, 0.0312), 0.0, 0.0274),
        ((0.0084, 0.0, 2, 0.0100), 0.0, 0.0),  # under 10 ms: neither
    ],
)
def test_a_late_wake_up_is_split_between_the_cpu_and_the_gil(wake, cpu: float, gil: float) -> None:
    assert late_wake_parts(*wake) == pytest.approx((cpu, gil), abs=1e-9)


class FakeTime:
    """The clocks ``callsamples`` reads, moved by the test (threads' CPU clocks stay real)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def perf_counter_ns(self) -> int:
        return int(self.now * 1e9)

    def clock_gettime_ns(self, clock: int) -> int:
        return time.clock_gettime_ns(clock)


class Replayed(_CallSamplerMixin):
    """The sampler, its readings of the kernel replaced by recorded ones."""

    def __init__(self) -> None:
        self.config = dict(DEFAULT_CONFIG)
        self.monitor = None
        self.sent: list[dict] = []
        self.delay_ns = 0
        self.ran = (0, 0.0)
        self._init_call_samples()

    def _send(self, msg: dict) -> None:
        self.sent.append(msg)

    def _run_delay(self, me: int) -> int:
        return self.delay_ns

    def _threads_ran(self, clocks: list) -> tuple[int, float]:
        return self.ran


def replay(monkeypatch: pytest.MonkeyPatch, wakes: list[tuple]) -> dict:
    """The agent's 100 Hz wake-ups, each on time or as ``wakes`` recorded; its message."""
    clock = FakeTime()
    here = stack_of(sys._getframe())
    monkeypatch.setattr(callsamples, "time", clock)
    a = Replayed()
    a._start_call_samples()
    for late, delay, ran, cpu in wakes:
        a._note_sleep()
        asked = clock.now + 0.010
        clock.now = asked + late
        a.delay_ns += int((delay or 0.0) * 1e9)
        a.ran = (ran, cpu)
        a._note_wake(asked, [])
        a.call_samples.append((7, clock.perf_counter_ns(), here))  # a stage call's thread
    a._flush_call_samples(0)
    (msg,) = a.sent
    return msg


ON_TIME = (0.0, 0.0, 1, 0.005)


def every_third(wake: tuple, n: int = 150) -> list[tuple]:
    return [wake if i % 3 == 2 else ON_TIME for i in range(n)]


def gil_finding(msg: dict, duration_s: float):
    """The host's gil-contention finding (None: silent) from one samples message."""
    session = Session()
    for raw in convert(msg):
        for ev in session.intern(raw):
            session.apply(ev)
    share = session_pauses(session, None, duration_s).gil_share
    return share, RULES["gil-contention"](FindingInput(gil_wait_share=share), FindingThresholds())


def duration(wakes: list[tuple]) -> float:
    return sum(0.010 + w[0] for w in wakes)


def test_a_single_thread_keeping_the_gil_is_no_gil_contention(monkeypatch) -> None:
    """The agent's thread woke 10.6 ms late a third of the time (it waited for the GIL, 30 % of
    the time: the finding fired before); no thread of the target waited."""
    wakes = every_third(SINGLE)
    msg = replay(monkeypatch, wakes)
    assert msg["gil_waits"] == [] and msg["cpu_waits"] == []
    share, finding = gil_finding(msg, duration(wakes))
    assert share == 0.0 and finding is None


def test_two_threads_of_the_target_waiting_for_each_other_are_gil_contention(monkeypatch) -> None:
    wakes = every_third(HOG_AND_MAIN)
    msg = replay(monkeypatch, wakes)
    assert len(msg["gil_waits"]) == 50 and msg["cpu_waits"] == []
    t0, t1 = msg["gil_waits"][0]
    assert t1 - t0 == pytest.approx(0.0271, abs=1e-6)
    share, finding = gil_finding(msg, duration(wakes))
    assert share == pytest.approx(50 * 0.0271 / duration(wakes), rel=1e-3)
    assert finding is not None and finding.evidence["gil_wait_share"] >= 0.35


def test_a_wake_up_late_for_a_cpu_is_a_cpu_wait_not_gil_contention(monkeypatch) -> None:
    wakes = every_third(HOST_BUSY, 150) + every_third(HOST_BUSY_HOLDER, 150)
    msg = replay(monkeypatch, wakes)
    assert msg["gil_waits"] == [] and len(msg["cpu_waits"]) == 100
    a, b = msg["cpu_waits"][0]
    assert b - a == pytest.approx(0.01747, abs=1e-6)
    share, finding = gil_finding(msg, duration(wakes))
    assert share == 0.0 and finding is None


def test_a_client_without_cpu_waits_reads_the_message() -> None:
    """``cpu_waits`` is new: a host that does not know it reads the rest as before."""
    msg = callsamples.sample_message([], 0, 100.0, [(1_000_000_000, 1_020_000_000)], [(5, 9)])
    (raw,) = convert(msg)
    assert raw.gil_waits == ((1.0, 1.02),) and msg["cpu_waits"] == [[5e-9, 9e-9]]


class Measured(_CallSamplerMixin):
    def __init__(self) -> None:
        self.config = dict(DEFAULT_CONFIG)
        self.monitor = None
        self._init_call_samples()


def _sampler_beside(*workers) -> Measured:
    """The real sampler (real clocks and schedstat) polling at 100 Hz for 1.5 s on a thread of
    its own beside ``workers`` (daemon threads of this process, started first)."""
    for w in workers:
        threading.Thread(target=w, daemon=True).start()
    a = Measured()

    def poll() -> None:
        a._start_call_samples()
        nxt = time.monotonic()
        until = nxt + 1.5
        while time.monotonic() < until:
            nxt = max(nxt + 0.010, time.monotonic() + 0.005)
            a._note_sleep()
            time.sleep(max(0.0, nxt - time.monotonic()))
            a._note_wake(nxt, [])

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    t.join(30)
    return a


def _keep_the_gil(stop: threading.Event):
    def run() -> None:
        while not stop.is_set():
            sum(range(1_500_000))  # the builtin checks no eval breaker: ~30-50 ms with the GIL
            time.sleep(0.001)

    return run


def _wake_often(stop: threading.Event):
    def run() -> None:
        while not stop.is_set():
            time.sleep(0.003)

    return run


@pytest.mark.slow  # in-process, but seconds long
def test_real_threads_one_keeping_the_gil_alone_then_with_another() -> None:
    """Measured, not replayed: a thread that keeps the GIL makes the agent's thread late all the
    time, but alone it is no GIL wait of the target's; with a second thread that wakes every
    3 ms (and then waits for the GIL) it is."""
    stop = threading.Event()
    try:
        alone = _sampler_beside(_keep_the_gil(stop))
    finally:
        stop.set()
    time.sleep(0.2)
    stop = threading.Event()
    try:
        both = _sampler_beside(_keep_the_gil(stop), _wake_often(stop))
    finally:
        stop.set()

    def total(waits) -> float:
        return sum(b - a for a, b in waits) / 1e9

    # alone: the odd wake-up of another thread of the test process may land in one; the old
    # agent counted ~1.2 s of the 1.5 here. Both: late for most of the 1.5 s (a busy host only
    # makes it later), part of it a GIL wait, more than alone's: how much of the lateness is
    # the GIL's and how much a CPU's depends on the host, and is not judged here
    assert total(alone.gil_waits) < 0.15, list(alone.gil_waits)
    late = total(both.gil_waits) + total(both.cpu_waits)
    assert late > 0.5 and total(both.gil_waits) > total(alone.gil_waits), (
        list(both.gil_waits), list(both.cpu_waits))  # fmt: skip


def _pin(pid: int, cpu: int | None) -> None:
    """Every thread of ``pid`` onto ``cpu`` (None: leave them)."""
    if cpu is not None:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), {cpu})


def _injected_waits(
    targets, python: str, flag: str, seconds: float = 4.0, cpu: int | None = None
) -> tuple[float, float]:
    """Seconds of GIL waits and of CPU waits the agent injected into ``pauses_target.py``
    (``flag``; no event loop thread; pinned to ``cpu``) sent in ``seconds``."""
    from agenthelpers import Client

    from infertop.agent.inject import inject

    t = targets("pauses_target.py", args=("--block-ms", "0", flag), python=python)
    _pin(t.pid, cpu)
    result = inject(t.pid, require_torch=False)
    assert result.ok, result.reason
    _pin(t.pid, cpu)  # the agent's thread too
    client = Client(result.socket_path)
    gil = cpu = 0.0
    try:
        client.call("hello", client="gil")
        client.call("start")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                msg = client.wait_for("samples", timeout=1.0)
            except AssertionError:
                continue  # nothing late in the last flush: no message
            assert "cpu_waits" in msg
            gil += sum(b - a for a, b in msg["gil_waits"])
            cpu += sum(b - a for a, b in msg["cpu_waits"])
        client.call("detach")
    finally:
        client.close()
    return gil, cpu


@pytest.mark.slow
@pytest.mark.parametrize("version", ["3.8", "3.12"])
def test_injected_one_thread_keeping_the_gil_then_two(targets, version: str) -> None:
    """The agent in a real target: one thread whose loop ends in a json.dumps keeping the GIL
    ~20 ms (the agent before sent ~45 % of the time as GIL waits) sends none; a thread in the
    builtin sum beside the main thread, whose sleeps end while it holds the GIL, sends most."""
    from agenthelpers import pyenv_python

    python = pyenv_python(version)
    if python is None:
        pytest.skip(f"no Python {version} under pyenv")
    alone, _ = _injected_waits(targets, python, "--serialize")
    assert alone < 0.2, alone  # of 4 s
    # most of the 4 s late (a busy host only makes it later), part of it a GIL wait, more than
    # alone's; the split between the GIL and a CPU depends on the host (1.2-2.2 s of GIL on a
    # quiet machine, 0.39 of 1.7 s late beside two CPU hogs) and is not judged here
    both, cpu = _injected_waits(targets, python, "--gil-hog")
    assert both + cpu > 1.2 and both > alone, (both, cpu, alone)


@pytest.mark.slow
@pytest.mark.solo  # two CPU hogs fill one core for 4 s
def test_injected_on_a_core_two_hogs_share_the_wait_is_for_a_cpu(targets) -> None:
    """The json.dumps target on one core with two processes spinning there: its thread holds
    the GIL, then waits for the core while holding it, and the agent's thread waits on both.
    No thread of the target waited for another: no GIL wait; the waits are for a CPU (the
    agent before sent 3.3 s of 4 as GIL waits, this one 2.1 s as CPU waits)."""
    from agenthelpers import pyenv_python

    python = pyenv_python("3.12") or sys.executable
    cpu = min(os.sched_getaffinity(0))
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"],
                         preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
        for _ in range(2)
    ]  # fmt: skip
    try:
        gil, waited = _injected_waits(targets, python, "--serialize", cpu=cpu)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert gil < 0.2, (gil, waited)
    assert waited > 0.8, (gil, waited)
