"""A target's process tree, for ``--children``: py-spy's process frames and ``/proc``.

``py-spy record --subprocesses`` roots every stack in one ``process PID:"CMDLINE"`` frame per
process from the target down to the one sampled (``process 10:"router";process 12:"worker";
thread (12): MainThread;...``). ``split_processes`` takes those frames off, so the rest parses
as a single process's output, and says which process each thread belongs to (thread ids are
unique across a pid namespace, so a thread id names its process).
"""

from __future__ import annotations

import re

from infertop import procfs
from infertop.collect.target import pid_alive
from infertop.model.events import Marker

_PROCESS_RE = re.compile(r'^process (\d+):"(.*)"$', re.DOTALL)
_THREAD_ID_RE = re.compile(r"^thread \((0x[0-9a-fA-F]+|\d+)\)")


def split_processes(
    text: str,
) -> tuple[str, dict[int, int], dict[int, tuple[int, str]]]:
    """py-spy raw output with process frames → (the output without them, {thread id: pid},
    {pid: (parent pid or 0, cmdline)}). Lines without process frames pass through unchanged."""
    lines: list[str] = []
    thread_pid: dict[int, int] = {}
    processes: dict[int, tuple[int, str]] = {}
    for line in text.splitlines():
        parent = 0
        pid = 0
        rest = line
        while rest.startswith("process "):
            # a cmdline may hold ';' and even '";': the frame ends where the next process or
            # thread frame starts
            ends = [e for e in (rest.find('";process '), rest.find('";thread (')) if e >= 0]
            end = min(ends) if ends else rest.find('";')
            if end < 0:
                break
            m = _PROCESS_RE.match(rest[: end + 1])
            if m is None:
                break
            pid = int(m.group(1))
            if pid not in processes or (parent and not processes[pid][0]):
                processes[pid] = (parent, m.group(2))
            parent = pid
            rest = rest[end + 2 :]
        if pid:
            t = _THREAD_ID_RE.match(rest)
            if t is not None:
                tid_text = t.group(1)
                tid = int(tid_text, 16) if tid_text.startswith("0x") else int(tid_text)
                thread_pid[tid] = pid
        lines.append(rest)
    return "\n".join(lines), thread_pid, processes


def read_ppid(pid: int) -> int | None:
    """The parent pid from ``/proc/PID/stat``; None when the process is gone."""
    return procfs.ppid(pid)


def read_cmdline(pid: int) -> str:
    """The command line, its arguments joined by spaces ("" when the process is gone)."""
    try:
        return " ".join(procfs.cmdline(pid))
    except OSError:
        return ""


def _children_files(pid: int) -> list[int] | None:
    """Children of ``pid`` from ``/proc/PID/task/*/children`` (each thread's own children);
    None when the kernel does not offer those files (or ``pid`` is gone)."""
    try:
        tids = procfs.threads(pid)
    except OSError:
        return None
    out: list[int] = []
    for tid in tids:
        try:
            out.extend(procfs.thread_children(pid, tid))
        except FileNotFoundError:
            if tid == tids[0]:
                return None  # no such files in this kernel: scan instead
        except (OSError, ValueError):
            pass  # the thread ended meanwhile
    return out


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, grandchildren, ...), from ``/proc``: the
    kernel's per-thread children lists where it has them (a few reads per process followed),
    else one scan of every process's parent pid."""
    first = _children_files(pid)
    if first is not None:
        out: list[int] = []
        todo = list(first)
        while todo:
            p = todo.pop()
            out.append(p)
            todo.extend(_children_files(p) or ())
        return sorted(set(out))
    return _scan_descendants(pid)


def _scan_descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    try:
        pids = procfs.pids()
    except OSError:
        return []
    for p in pids:
        ppid = read_ppid(p)
        if ppid is not None:
            children.setdefault(ppid, []).append(p)
    out: list[int] = []
    todo = list(children.get(pid, ()))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return sorted(out)


def gone(pids: list[int]) -> list[int]:
    """The pids among ``pids`` that have exited (zombies count as exited)."""
    return [p for p in pids if not pid_alive(p)]


def exit_marker(t: float, pid: int, cmdline: str) -> Marker:
    """The timeline's note that a followed process is gone (the others carry on)."""
    return Marker(
        t, f"process {pid} exited", {"pid": str(pid), "process": "exited", "cmdline": cmdline[:200]}
    )
