"""Kernel accounting keeps py-spy's "active" honest: a sleeping thread is not active, a thread
waiting for its CPU is."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from infertop.collect.thread_cpu import (
    SLACK,
    SPARE,
    ProcessCpuWaits,
    clamp_to_runnable,
    thread_cpu_ns,
    thread_runnable_ns,
)
from infertop.model.events import Frame

SLEEPER = (Frame("helper", "/srv/metrics.py", 5),)
WORKER = (Frame("encode", "/srv/tok.py", 9),)


def test_real_threads_cpu_time_tells_a_sleeper_from_a_worker() -> None:
    stop = threading.Event()
    tids: dict[str, int] = {}

    def sleeper() -> None:
        tids["sleeper"] = threading.get_native_id()
        while not stop.is_set():
            time.sleep(0.05)

    def worker() -> None:
        tids["worker"] = threading.get_native_id()
        while not stop.is_set():
            sum(i * i for i in range(2000))

    threads = [threading.Thread(target=f, daemon=True) for f in (sleeper, worker)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + 5
    while len(tids) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    before = thread_runnable_ns([os.getpid()])
    # the window lasts until the worker has run 0.3 s (0.5 s on a quiet machine, longer on a
    # busy one): the sleeper's CPU over the same window is what is judged
    deadline = time.monotonic() + 60
    while True:
        time.sleep(0.05)
        after = thread_runnable_ns([os.getpid()])
        if after[tids["worker"]] - before[tids["worker"]] >= 0.3e9:
            break
        assert time.monotonic() < deadline, "the worker thread got no CPU time in 60 s"
    stop.set()
    for th in threads:
        th.join()
    # as py-spy might report them at 100 Hz: both "active" in 40 of 50 samples
    rows = [(tids["sleeper"], "metrics", SLEEPER, 40), (tids["worker"], "worker", WORKER, 40)]
    kept = {tid: n for tid, _name, _stack, n in clamp_to_runnable(rows, before, after, 100.0)}
    # the sleeper is cut to what its runnable time allows (on a quiet machine well under a
    # millisecond: none of its 40; where other work takes the cores, each wake-up's wait for a
    # CPU is runnable time too, and it keeps that much), the worker, always runnable, keeps
    # its 40 (it ran 0.3 s at least: 30 samples' worth, and more with slack)
    sleeper_s = (after[tids["sleeper"]] - before[tids["sleeper"]]) / 1e9
    worker_s = (after[tids["worker"]] - before[tids["worker"]]) / 1e9
    assert sleeper_s < worker_s / 2, (sleeper_s, worker_s)
    assert kept.get(tids["sleeper"], 0) == min(40, int(sleeper_s * 100 * SLACK + SPARE)), (kept, sleeper_s)
    assert kept[tids["worker"]] >= 20


def test_a_process_waiting_for_its_cpu_beside_a_hog_keeps_its_samples() -> None:
    """Held to one CPU with a hog, a busy process runs about half the time: py-spy finds it
    active at every tick (waiting for the CPU, it is still in its own code), and it keeps
    those samples; its time on a CPU alone would have kept about half."""
    busy = [sys.executable, "-c", "while True: pass"]
    procs = [subprocess.Popen(busy, preexec_fn=lambda: os.sched_setaffinity(0, {0})) for _ in range(2)]
    try:
        pid = procs[0].pid
        before, cpu_before, t0 = thread_runnable_ns([pid]), thread_cpu_ns([pid]), time.monotonic()
        deadline = t0 + 30
        while thread_cpu_ns([pid])[pid] - cpu_before[pid] < 0.3e9:
            assert time.monotonic() < deadline, "the process never ran 0.3 s"
            time.sleep(0.05)
        after, cpu_after = thread_runnable_ns([pid]), thread_cpu_ns([pid])
        ticks = int((time.monotonic() - t0) * 100)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    rows = [(pid, "main", WORKER, ticks)]  # active at every tick of 100 Hz
    kept = clamp_to_runnable(rows, before, after, 100.0)[0][3]
    on_cpu = clamp_to_runnable(rows, cpu_before, cpu_after, 100.0)[0][3]
    assert kept >= 0.9 * ticks, (kept, ticks)
    assert on_cpu < 0.9 * ticks, f"not starved: {on_cpu} of {ticks} samples on a CPU"


def test_threads_the_kernel_does_not_know_are_left_as_they_are() -> None:
    rows = [(0xDEAD, "x", WORKER, 30)]
    assert clamp_to_runnable(rows, {1: 0}, {1: 10}, 100.0) == rows
    assert clamp_to_runnable(rows, {}, {}, 100.0) == rows


def test_a_clamped_thread_keeps_its_stacks_in_proportion() -> None:
    other = (Frame("json_dumps", "/srv/out.py", 3),)
    rows = [(7, "w", WORKER, 30), (7, "w", other, 10), (8, "x", WORKER, 5)]
    # thread 7 ran 0.1 s of a window at 100 Hz: 15 samples allowed (slack 1.5), thread 8 is free
    kept = clamp_to_runnable(rows, {7: 0, 8: 0}, {7: 100_000_000, 8: 10**9}, 100.0)
    assert [(tid, n) for tid, _name, _stack, n in kept] == [(7, 12), (7, 3), (8, 5)]


def test_cpu_waits_see_a_process_wait_for_its_cpu_beside_a_hog() -> None:
    """Two busy processes held to one CPU: each runs about half the time it wants and waits on
    the run queue the rest, and the kernel's accounting read from outside says so, interval by
    interval, as the sampler reads it at each window's end."""
    busy = [sys.executable, "-c", "while True: pass"]
    procs = [subprocess.Popen(busy, preexec_fn=lambda: os.sched_setaffinity(0, {0})) for _ in range(2)]
    try:
        reader = ProcessCpuWaits()
        assert reader.read([procs[0].pid], time.time()) == []  # nothing to compare with yet
        run = wait = 0
        deadline = time.monotonic() + 30
        while run < 1e9 and time.monotonic() < deadline:
            time.sleep(0.05)
            (w,) = reader.read([procs[0].pid], time.time())
            assert w.pid == procs[0].pid and w.t_end > w.t_start
            run, wait = run + w.run_ns, wait + w.wait_ns
        assert run >= 1e9, "the process never ran a second"
        # half on a quiet machine; anything else on CPU 0 only adds to the wait
        assert 0.3 < wait / (run + wait) < 0.9, (run, wait)
    finally:
        for p in procs:
            p.kill()
            p.wait()
