"""--children: py-spy's process frames, the process events in recordings, the session's map."""

from __future__ import annotations

import os
import subprocess

import pytest

from infertop.analysis.session import Session
from infertop.collect.pyspy import RawSampleWindow, parse_raw
from infertop.collect.tree import descendants, read_cmdline, read_ppid, split_processes
from infertop.model.events import Frame, ProcessDef, ThreadDef
from infertop.record.format import decode_event, encode_event

RAW = (
    'process 10:"python router.py --workers 2";thread (10): MainThread;'
    "<module> (/srv/router.py:5);wait (/usr/lib/python3.11/threading.py:320) 4\n"
    'process 10:"python router.py --workers 2";process 12:"python -c spawn_main(); x=1";'
    "thread (0xd): MainThread;<module> (<string>:1);forward (/srv/model.py:40) 57\n"
    'process 10:"python router.py --workers 2";process 12:"python -c spawn_main(); x=1";'
    "process 15:\"python helper.py\";thread (15): MainThread;run (/srv/helper.py:9) 3\n"
)


def test_process_frames_name_each_threads_process_and_parent() -> None:
    text, thread_pid, procs = split_processes(RAW)
    assert thread_pid == {10: 10, 13: 12, 15: 15}
    assert procs == {
        10: (0, "python router.py --workers 2"),
        12: (10, "python -c spawn_main(); x=1"),  # a ';' inside a cmdline is kept
        15: (12, "python helper.py"),
    }
    rows, bad = parse_raw(text)
    assert bad == 0
    assert [(tid, name, n) for tid, name, _st, n in rows] == [
        (10, "MainThread", 4), (13, "MainThread", 57), (15, "MainThread", 3)
    ]
    assert rows[1][2][-1] == Frame("forward", "/srv/model.py", 40)


def test_a_cmdline_with_quote_semicolon_stays_whole() -> None:
    raw = 'process 5:"sh -c "a";b";thread (6): Main;f (x.py:1) 3'
    text, thread_pid, procs = split_processes(raw)
    assert text == "thread (6): Main;f (x.py:1) 3"
    assert thread_pid == {6: 5} and procs == {5: (0, 'sh -c "a";b')}


def test_output_without_process_frames_passes_through() -> None:
    plain = "thread (7): MainThread;main (/srv/a.py:3) 5"
    text, thread_pid, procs = split_processes(plain)
    assert text == plain and thread_pid == {} and procs == {}


def test_process_events_round_trip_and_old_thread_events_still_read() -> None:
    for ev in (ProcessDef(12, 10, "python worker.py"), ThreadDef(13, "MainThread", 12),
               ThreadDef(7, "MainThread")):  # fmt: skip
        assert decode_event(encode_event(ev)) == ev
    assert encode_event(ThreadDef(7, "MainThread")) == [4, 7, "MainThread"]  # as 1.2 wrote it
    assert decode_event([4, 7, "MainThread"]) == ThreadDef(7, "MainThread", 0)


def test_session_learns_processes_and_threads_from_a_window() -> None:
    s = Session()
    f = (Frame("forward", "/srv/model.py", 40),)
    raw = RawSampleWindow(
        0.0, 1.0, 100.0, 100, ((10, "MainThread", f, 4), (13, "MainThread", f, 57)),
        thread_pids=((10, 10), (13, 12)),
        processes=((10, 0, "router"), (12, 10, "worker")),
    )  # fmt: skip
    events = s.intern(raw)
    for ev in events:
        s.apply(ev)
    assert ProcessDef(12, 10, "worker") in events and ThreadDef(13, "MainThread", 12) in events
    assert s.thread_pid == {10: 10, 13: 12} and set(s.processes) == {10, 12}
    # a second window of the same processes defines nothing again
    again = s.intern(raw)
    assert not any(isinstance(e, (ProcessDef, ThreadDef)) for e in again)


@pytest.mark.slow  # starts a child process
def test_proc_tree_of_this_process() -> None:
    from infertop.collect.tree import _scan_descendants

    me = os.getpid()
    assert read_ppid(me) == os.getppid()
    assert me in descendants(os.getppid())
    child = subprocess.Popen(["sleep", "30"])
    try:
        # the kernel's children lists and the full scan agree
        assert child.pid in descendants(me) and child.pid in _scan_descendants(me)
        assert child.pid in descendants(os.getppid())  # a grandchild too
    finally:
        child.kill()
        child.wait()
    assert "python" in read_cmdline(me) or "pytest" in read_cmdline(me)
    assert read_ppid(2**22 + 12345) is None


def test_per_process_shares_roles_and_exits() -> None:
    from infertop.analysis.processes.shares import process_shares
    from infertop.model.events import FrameDef, Marker, SampleWindow, StackDef, TargetInfo

    s = Session()
    for ev in (
        TargetInfo(10, "python router.py"),
        ProcessDef(10, 0, "python router.py"),
        ProcessDef(11, 10, "python -c from multiprocessing.resource_tracker import main;main(5)"),
        ProcessDef(12, 10, "python -c spawn_main()"),
        ProcessDef(13, 10, "python -c spawn_main()"),
        ThreadDef(10, "MainThread", 10), ThreadDef(12, "MainThread", 12),
        ThreadDef(13, "MainThread", 13),
        FrameDef(0, Frame("encode_batch", "/srv/tokenizer.py", 3)),
        FrameDef(1, Frame("forward", "/srv/model.py", 9)),
        StackDef(0, (0,)), StackDef(1, (1,)),
        SampleWindow(0.0, 1.0, 100.0, 100, ((10, 0, 5), (12, 1, 30), (12, 0, 10), (13, 1, 20))),
        Marker(1.5, "process 13 exited", {"pid": "13", "process": "exited"}),
    ):  # fmt: skip
        s.apply(ev)
    by_pid = {p.pid: p for p in process_shares(s)}
    assert [p.pid for p in process_shares(s)] == [10, 11, 12, 13]  # the target first
    # the workers run the model: named for it (analysis/processes/activity.py), in pid order
    assert [by_pid[p].role for p in (10, 11, 12, 13)] == [
        "router", "resource tracker", "inference 1", "inference 2"
    ]
    assert by_pid[12].samples == 40 and dict(by_pid[12].stages)["forward"] == 30
    assert by_pid[13].exited_t == 1.5 and by_pid[12].exited_t is None
    assert by_pid[11].samples == 0
    assert by_pid[12].gpu_memory is None  # no NVML readings: unknown, not zero
    assert process_shares(Session()) == []  # one process followed: no section


def test_every_process_gets_its_gpu_memory_from_nvml_also_non_python_ones() -> None:
    from infertop.analysis.processes.shares import process_shares
    from infertop.model.events import TargetInfo
    from infertop.model.gpu import GpuDeviceReading, GpuReading
    from infertop.report.processes import processes_text

    s = Session()
    for ev in (
        TargetInfo(10, "python router.py"),
        ProcessDef(10, 0, "python router.py"),
        ProcessDef(14, 10, "/opt/bin/cuda_server --port 9"),  # not Python: never sampled
        GpuReading(1.0, (GpuDeviceReading(0, processes=((14, 3 << 30), (99, 1 << 30))),
                         GpuDeviceReading(1, processes=((14, 1 << 30),)))),
    ):  # fmt: skip
        s.apply(ev)
    by_pid = {p.pid: p for p in process_shares(s)}
    assert by_pid[14].gpu_memory == 4 << 30 and by_pid[14].samples == 0
    assert by_pid[10].gpu_memory == 0
    from infertop.report.processes import processes_section

    lines = processes_text({"processes": processes_section(s)})
    assert any("pid 14" in line and "4.00 GiB GPU memory" in line for line in lines)


class _TreeCollector:
    """Hands over one --children window the first time it is polled."""

    name = "py-spy"

    def __init__(self) -> None:
        f = (Frame("forward", "/srv/model.py", 40),)
        self.pending: list[object] = [
            RawSampleWindow(
                10.0, 11.0, 100.0, 100, ((10, "MainThread", f, 4), (13, "MainThread", f, 57)),
                thread_pids=((10, 10), (13, 12)),
                processes=((10, 0, "python router.py"), (12, 10, "python worker.py")),
            )
        ]  # fmt: skip

    def start(self) -> None:
        pass

    def poll(self) -> list[object]:
        out, self.pending = self.pending, []
        return out

    def stop(self) -> None:
        pass


def test_a_recording_started_mid_session_defines_the_processes_first(tmp_path) -> None:
    from infertop.config import Config
    from infertop.model.events import TargetInfo
    from infertop.record.reader import read_recording
    from infertop.sources import LiveSource

    src = LiveSource(TargetInfo(10, "python router.py"), Config(), collectors=[_TreeCollector()])
    src.pump()  # the processes are known before the recording begins (key r in the UI)
    path = str(tmp_path / "late.infertop")
    src.start_recording(path)
    src.stop()
    events = read_recording(path).events
    assert ProcessDef(12, 10, "python worker.py") in events
    assert ThreadDef(13, "MainThread", 12) in events
    replayed = Session()
    for ev in events:
        replayed.apply(ev)
    assert replayed.thread_pid == {10: 10, 13: 12} and set(replayed.processes) == {10, 12}
