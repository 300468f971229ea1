"""``infertop.procfs``: /proc read right, this test's own process and fixture text."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from infertop import procfs

GONE = 2**22 + 12345  # above pid_max's default ceiling: never a live pid

# the kernel's line for a process that named itself "(a) b)" (prctl PR_SET_NAME allows it)
TRICKY = (
    "4242 ((a) b)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 12 34 0 0 20 0 3 0 987654 "
    "12345678 2500 18446744073709551615 1 1 0 0 0 0 0 16781312 0 0 0 17 5 0 0 0 0 0\n"
)


def test_a_comm_with_spaces_and_parentheses_ends_at_the_last_parenthesis() -> None:
    st = procfs.parse_stat(TRICKY)
    assert st.pid == 4242
    assert st.comm == "(a) b)"
    assert st.state == "S"
    assert st.ppid == 1
    assert st.field(1) == "4242" and st.field(2) == "(a) b)" and st.field(3) == "S"
    assert st.field(14) == "12" and st.field(15) == "34"  # utime, stime
    assert st.start_time == 987654


@pytest.mark.parametrize("text", ["", "4242", "4242 (python", "4242 (python)", "garbage) S 1"])
def test_what_is_not_a_stat_line_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        procfs.parse_stat(text)


def test_a_field_past_the_end_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        procfs.parse_stat(TRICKY).field(99)


def test_this_process_s_own_stat() -> None:
    me = os.getpid()
    st = procfs.read_stat(me)
    assert st.pid == me
    assert st.state in ("R", "S")
    assert st.ppid == os.getppid() == procfs.ppid(me)
    assert st.start_time == procfs.start_time(me) > 0
    assert procfs.state(me) in ("R", "S")
    # the main thread's own stat is the process's
    assert procfs.read_stat(me, me).pid == me


def test_a_gone_process_reads_as_none_or_oserror() -> None:
    assert procfs.state(GONE) is None
    assert procfs.ppid(GONE) is None
    assert procfs.start_time(GONE) is None
    procfs.resume_if_stopped(GONE)  # never raises
    for read in (procfs.read_stat, procfs.status, procfs.cmdline, procfs.threads, procfs.maps):
        with pytest.raises(OSError):
            read(GONE)


@pytest.mark.slow  # starts a child process
def test_a_child_with_a_tricky_name_and_a_stop() -> None:
    code = (
        "import ctypes, sys, time\n"
        "ctypes.CDLL(None).prctl(15, b'(a) b)', 0, 0, 0)\n"  # PR_SET_NAME
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    argv = [sys.executable, "-c", code, "", "x"]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        st = procfs.read_stat(child.pid)
        assert st.comm == "(a) b)" and st.ppid == os.getpid() and st.state in ("R", "S")
        # trailing empty arguments are dropped, inner ones kept
        assert procfs.cmdline(child.pid) == argv
        os.kill(child.pid, 19)  # SIGSTOP
        deadline = time.monotonic() + 5
        while procfs.state(child.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert procfs.state(child.pid) == "T"
        procfs.resume_if_stopped(child.pid)
        deadline = time.monotonic() + 5
        while procfs.state(child.pid) == "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert procfs.state(child.pid) in ("R", "S")
    finally:
        child.kill()
        child.wait()


def test_status_threads_and_schedstat_of_this_process() -> None:
    me = os.getpid()
    st = procfs.status(me)
    assert int(st["Pid"][0]) == me
    assert int(st["Uid"][1]) == os.geteuid()
    assert procfs.ns_pids(me)[-1] == me or procfs.ns_pids(me) == []
    started = threading.Event()
    stop = threading.Event()
    tid: list[int] = []

    def spin() -> None:
        tid.append(threading.get_native_id())
        started.set()
        while not stop.is_set():
            sum(i for i in range(1000))

    th = threading.Thread(target=spin)
    th.start()
    try:
        started.wait(5)
        time.sleep(0.05)
        assert me in procfs.pids() and os.getppid() in procfs.pids()
        assert me in procfs.threads(me) and tid[0] in procfs.threads(me)
        run_ns, wait_ns, slices = procfs.schedstat(me, tid[0])
        assert run_ns > 0 and wait_ns >= 0 and slices > 0
        assert procfs.read_stat(me, tid[0]).pid == tid[0]
        assert procfs.thread_children(me, tid[0]) == []
    finally:
        stop.set()
        th.join()


def test_cmdline_and_maps_of_this_process() -> None:
    assert procfs.cmdline(os.getpid()) == sys.orig_argv  # Python's own copy of its argv
    maps = procfs.maps(os.getpid())
    assert maps and all(m.path.startswith("/") and m.start < m.end for m in maps)
    exe = os.path.realpath(sys.executable)
    assert any(m.path == exe or "libpython" in m.path for m in maps)


def test_cpu_flags() -> None:
    flags = procfs.cpu_flags()
    if os.uname().machine in ("x86_64", "amd64"):
        assert "fpu" in flags
    else:
        assert isinstance(flags, set)
