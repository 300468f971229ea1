"""Per-process view of a session followed with ``--children``: who each process is and where
its active samples go. Pure functions over a ``Session``; the merged picture stays as it is."""

from __future__ import annotations

from dataclasses import dataclass

from infertop.analysis.processes.activity import activity_roles
from infertop.analysis.processes.roles import engine_role, process_roles, role_of
from infertop.analysis.session import Session
from infertop.analysis.stages import IDLE


@dataclass(frozen=True, slots=True)
class ProcessShare:
    pid: int
    ppid: int
    cmdline: str
    role: str
    samples: int  # active samples (idle excluded)
    stages: tuple[tuple[str, int], ...]  # (stage, samples), most first
    exited_t: float | None  # unix time infertop noticed it was gone
    gpu_memory: int | None = None  # bytes on every GPU in NVML's newest reading; None: no NVML


#: roles the command line gives for sure, before what a process's work suggests
BY_COMMAND_LINE = ("resource tracker", "forkserver")


def roles(session: Session) -> dict[int, str]:
    """pid -> role guess of every process followed: a rank or a merged recording's host
    where the recording says (``process_roles``); an LLM engine's processes by their titles
    (``engine_role``: ``vllm engine core``); a resource tracker or forkserver by its
    command line; else what its work shows (``activity_roles``: ``api``, ``inference 2``,
    ``litserve api``, ...); else from the tree: the target is the router when it has children
    among them (several PIDs given without ``--children`` are workers), the rest ``worker N``."""
    target = session.target.pid
    named = process_roles(session)
    work = activity_roles(session)
    parents = {p.ppid for p in session.processes.values()}
    router = target if target in parents else None
    out: dict[int, str] = {}
    workers = 0
    for pid in sorted(session.processes, key=lambda p: (p != target, p)):
        role = named.get(pid) or engine_role(session.processes[pid].cmdline)
        if role is None:
            by_tree = role_of(pid, router, session.processes[pid].cmdline, workers + 1)
            role = by_tree if by_tree in BY_COMMAND_LINE else work.get(pid, by_tree)
            workers += role == by_tree and role.startswith("worker")
        out[pid] = role
    return out


def exit_times(session: Session, t: float | None = None) -> dict[int, float]:
    """pid → when its exit was noticed (the collector's ``process exited`` markers)."""
    out: dict[int, float] = {}
    for m in session.markers:
        pid = m.extra.get("pid", "")
        if m.extra.get("process") == "exited" and pid.isdigit() and (t is None or m.t <= t):
            out.setdefault(int(pid), m.t)
    return out


def gpu_memory_by_pid(session: Session, t: float | None = None) -> dict[int, int] | None:
    """pid → bytes on all GPUs, from NVML's newest reading at or before ``t`` (its process
    list: host pids); None when there is no reading."""
    readings = session.gpu_upto(t)
    if not readings:
        return None
    out: dict[int, int] = {}
    for dev in readings[-1].devices:
        for pid, used in dev.processes:
            out[pid] = out.get(pid, 0) + used
    return out


def process_shares(session: Session, t: float | None = None) -> list[ProcessShare]:
    """Every followed process, the target first, then by pid; empty when only the target was
    followed (a session without ``--children``)."""
    if not session.processes:
        return []
    target = session.target.pid
    owner = session.thread_pid
    counts: dict[int, dict[str, int]] = {pid: {} for pid in session.processes}
    for pid, folded in session.folded_by_pid.items():  # a bounded session's older windows
        counts[pid] = {s: n for s, n in folded.stage_counts.items() if s != IDLE and n}
    for w in session.windows_between(None, t):
        if w.wall:  # a process's stages here are its CPU (the wall view is the session's)
            continue
        for tid, sid, n in w.window.counts:
            stage = session.stage_of(sid)
            if stage == IDLE:
                continue
            pid = owner.get(tid, target or 0)
            per = counts.setdefault(pid, {})
            per[stage] = per.get(stage, 0) + n
    exited = exit_times(session, t)
    gpu = gpu_memory_by_pid(session, t)
    order = sorted(counts, key=lambda p: (p != target, p))
    out: list[ProcessShare] = []
    named = roles(session)
    for pid in order:
        proc = session.processes.get(pid)
        cmdline = proc.cmdline if proc is not None else ""
        role = named.get(pid) or ("router" if pid == target else "worker")
        per = counts[pid]
        out.append(
            ProcessShare(
                pid,
                proc.ppid if proc is not None else 0,
                cmdline,
                role,
                sum(per.values()),
                tuple(sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))),
                exited.get(pid),
                None if gpu is None else gpu.get(pid, 0),
            )
        )
    return out
