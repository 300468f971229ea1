"""``[collect] realtime = true``: py-spy at real-time priority while its ticks come late
(collect/priority.py), with real processes: ``infertop record`` and its py-spy on a machine
whose cores are full, and stand-ins started as py-spy is (a busy loop, a sleeper) for what the
kernel allows and the spin guard."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from infertop.collect.priority import SamplerPriority
from infertop.collect.pyspy import _detach_from_terminal_and_die_with_parent, _realtime_child
from infertop.collect.thread_cpu import run_and_wait_ns
from infertop.collect.tree import descendants

from .helpers import INFERTOP, ROOT, start_target, stop_target, until

pytestmark = pytest.mark.slow
ANNOTATED = str(ROOT / "tests/integration/targets/annotated.py")
HOG = [sys.executable, "-c", "while True: pass"]


@pytest.fixture
def needs_realtime() -> None:
    try_it = "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))"
    if subprocess.run([sys.executable, "-c", try_it], capture_output=True, check=False).returncode:
        pytest.skip("this machine refuses SCHED_FIFO (needs root or CAP_SYS_NICE): py-spy runs "
                    "at normal priority there")  # fmt: skip


def _policies_under_record(target_pid: int, out: str, *config: str) -> list[int]:
    """The scheduling policies of the py-spys of an ``infertop record`` seen until one was
    real-time or 8 s passed (windows 1 s: the first at normal priority judges the ticks)."""
    rec = subprocess.Popen(
        INFERTOP + ["record", str(target_pid), "-o", out, "--duration", "30", *config],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    seen: list[int] = []
    started = time.monotonic()
    try:
        def done() -> bool:
            for child in descendants(rec.pid):  # py-spy: its sampling thread's child
                try:
                    seen.append(os.sched_getscheduler(child))
                except OSError:
                    continue  # a window's py-spy that just ended
            return (os.SCHED_FIFO in seen or rec.poll() is not None
                    or time.monotonic() - started > 8)  # fmt: skip

        until(done, 30, f"py-spys under infertop record (pid {rec.pid})")
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.communicate()
    assert rec.returncode == 0, err
    return seen


# solo: its hogs fill every core for several seconds, which would slow whatever ran beside it
@pytest.mark.solo
def test_on_a_machine_whose_cores_are_full_py_spy_goes_real_time_only_when_asked(
    tmp_path, needs_realtime
) -> None:
    """Three CPU hogs per two cores: py-spy's ticks come late. At the defaults it stays at
    normal priority (real-time costs the target: docs/performance.md); with ``[collect]
    realtime = true`` its first window judges them late and the next ones are real-time."""
    config = tmp_path / "realtime.toml"
    config.write_text("[collect]\nrealtime = true\n")
    target = start_target([ANNOTATED])
    hogs = [subprocess.Popen(HOG) for _ in range(len(os.sched_getaffinity(0)) + 1)]
    try:
        default = _policies_under_record(target.pid, str(tmp_path / "d.infertop"))
        asked = _policies_under_record(target.pid, str(tmp_path / "r.infertop"), "--config",
                                       str(config))  # fmt: skip
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        _, target_err = stop_target(target)
    assert default and set(default) == {os.SCHED_OTHER}, default
    assert asked[0] == os.SCHED_OTHER and os.SCHED_FIFO in asked, asked
    assert target_err == ""


def _late_priority() -> SamplerPriority:
    p = SamplerPriority(rate_hz=100)
    p.judge(waited_s=1.0, elapsed=1.0)
    assert p.next_window() is True
    return p


@pytest.mark.parametrize("busy", [True, False])
def test_a_real_time_py_spy_that_holds_a_cpu_goes_back_to_normal_at_once(
    busy: bool, needs_realtime
) -> None:
    """Started as a real-time py-spy is, a process that spins (as py-spy would on a target whose
    threads take longer to read than a tick) is put back at normal priority as soon as it took
    over half a CPU, and py-spy is never made real-time again; a sleeper (py-spy as it should
    be) stays real-time."""
    then = "while True: pass" if busy else "import time; time.sleep(60)"
    code = f"print('go', flush=True)\n{then}"
    cpu = {max(os.sched_getaffinity(0))}

    def start() -> None:
        os.sched_setaffinity(0, cpu)
        _realtime_child()

    priority = _late_priority()
    # timed from its start, as infertop times py-spy: its CPU is counted from then too (timed
    # from its "go", a spinner the test read late had spun 0.48 s "in 0.00 s": CI)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code], preexec_fn=start, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    since = lambda: time.monotonic() - started  # noqa: E731
    try:
        assert select.select([proc.stdout], [], [], 60)[0], f"pid {proc.pid} said nothing in 60 s"
        assert proc.stdout.readline() == "go\n"
        priority.started(proc.pid)
        assert os.sched_getscheduler(proc.pid) == os.SCHED_FIFO
        if busy:
            # past MAX_CPU with a margin, however long a busy machine took to start Python
            on = lambda: run_and_wait_ns([proc.pid])[0] / 1e9  # noqa: E731
            until(lambda: on() > max(0.3, 0.6 * since()), 60, f"pid {proc.pid} spinning")
        else:
            until(lambda: since() > 0.4, 30, "0.4 s")
        elapsed = since()
        priority.watch(proc.pid, elapsed)
        policy = os.sched_getscheduler(proc.pid)
        used = run_and_wait_ns([proc.pid])[0] / 1e9
    finally:
        proc.kill()
        proc.communicate()
    said = f"{used:.2f} s on a CPU in {elapsed:.2f} s"
    assert policy == (os.SCHED_OTHER if busy else os.SCHED_FIFO), said
    assert priority.next_window() is not busy


def test_where_the_kernel_refuses_real_time_py_spy_stays_normal() -> None:
    """A py-spy meant to be real-time that the kernel left at normal priority (no
    CAP_SYS_NICE): infertop stops asking."""
    priority = _late_priority()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            preexec_fn=_detach_from_terminal_and_die_with_parent)  # fmt: skip
    try:
        priority.started(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert priority.next_window() is False
    priority.judge(waited_s=1.0, elapsed=1.0)
    assert priority.next_window() is False
