"""Who each process of a many-process recording is, beyond ``--children``'s router/workers:
the ranks of an imported Kineto directory (``rank N``), and the hosts of a merged recording
(``HOST router``, ``HOST worker 2``, ``HOST target``), read from the ``merged input`` markers
``infertop merge`` writes (docs/processes.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from infertop.model.session import Session
from infertop.record.merge import MERGED_INPUT

RANK_RE = re.compile(r"^rank (\d+) \(")


@dataclass(frozen=True)
class InputOf:
    """One input of a merged recording: its host, its target and its processes (new pids)."""

    path: str
    host: str | None
    target: int
    pids: tuple[int, ...]


def merged_inputs(session: Session) -> list[InputOf]:
    out = []
    for m in session.markers:
        if m.text != MERGED_INPUT:
            continue
        x = m.extra
        pids = tuple(int(p) for p in x.get("pids", "").split(",") if p.isdigit())
        target = x.get("target", "")
        if not pids or not target.isdigit():
            continue
        out.append(InputOf(x.get("input", ""), x.get("host") or None, int(target), pids))
    return out


def rank_of(cmdline: str) -> int | None:
    m = RANK_RE.match(cmdline)
    return int(m.group(1)) if m else None


def process_roles(session: Session) -> dict[int, str]:
    """pid -> role for ranks and merged recordings' processes; empty when neither applies
    (``processes.role_of`` names a ``--children`` tree)."""
    from infertop.analysis.processes import role_of

    out: dict[int, str] = {}
    for pid, proc in session.processes.items():
        rank = rank_of(proc.cmdline)
        if rank is not None:
            out[pid] = f"rank {rank}"
    for inp in merged_inputs(session):
        workers = 0
        for pid in sorted(inp.pids, key=lambda p: (p != inp.target, p)):
            if pid in out:
                continue
            proc = session.processes.get(pid)
            role = role_of(pid, inp.target, proc.cmdline if proc else "", workers + 1)
            workers += role.startswith("worker")
            if role == "router" and len(inp.pids) == 1:
                role = "target"  # recorded without --children: one process
            out[pid] = f"{inp.host} {role}" if inp.host else role
    return out


def host_of(session: Session) -> dict[int, str]:
    """pid -> the host it was recorded on, where a merged recording says."""
    return {pid: inp.host for inp in merged_inputs(session) if inp.host for pid in inp.pids}
