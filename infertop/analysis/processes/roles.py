"""Who each process of a many-process recording is, beyond ``--children``'s router/workers:
the ranks of an imported Kineto directory (``rank N``), and the hosts of a merged recording
(``HOST router``, ``HOST worker 2``, ``HOST target``), read from the ``merged input`` markers
``infertop merge`` writes (docs/processes.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from infertop.analysis.session import Session
from infertop.model.events import MERGED_INPUT

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


def role_of(pid: int, target_pid: int | None, cmdline: str, worker_no: int) -> str:
    """A guess from the tree and the command line; the target is the router."""
    if pid == target_pid:
        return "router"
    if "multiprocessing.resource_tracker" in cmdline:
        return "resource tracker"
    if "multiprocessing.forkserver" in cmdline:
        return "forkserver"
    program = cmdline.split(" ", 1)[0].rsplit("/", 1)[-1]
    if program and "python" not in program:  # not a Python worker: say what it runs
        return f"child ({program[:24]})"
    return f"worker {worker_no}"


#: an LLM engine's processes by the title the engine gives them (``setproctitle``: vLLM's
#: ``VLLM::EngineCore``, ``VLLM::Worker_TP1``; SGLang's ``sglang::scheduler_TP0``), the part
#: after ``::``: (name, role). What follows the name (``_DP0_TP1``) is its rank, kept in
#: the role (``vllm model worker tp1``) so that every run names the same process the same way
ENGINE_TITLES: tuple[tuple[str, str], ...] = (
    ("VLLM::EngineCore", "vllm engine core"),
    ("VLLM::Worker", "vllm model worker"),
    ("VLLM::APIServer", "vllm api"),
    ("VLLM::DPCoordinator", "vllm dp coordinator"),
    ("sglang::scheduler", "sglang scheduler"),
    ("sglang::detokenizer", "sglang detokenizer"),
    ("sglang::data_parallel_controller", "sglang dp controller"),
)
#: an engine's API server keeps its command line: (a module or program in it, role)
ENGINE_COMMANDS: tuple[tuple[str, str], ...] = (
    ("vllm.entrypoints", "vllm api"),
    ("sglang.launch_server", "sglang api"),
)
_TITLE_RE = re.compile(r"^(\w+)::([A-Za-z]+(?:_[a-z]+)*)(?:_([A-Za-z0-9_]+))?")


#: the roles of an engine's scheduler: a session with one serves its requests through an LLM
#: engine, whose API process waits for the engine's steps (not for a hop between processes)
ENGINE_SCHEDULERS: tuple[str, ...] = ("vllm engine core", "sglang scheduler")


def has_llm_engine(roles: dict[int, str] | tuple[tuple[int, str], ...]) -> bool:
    """Whether one of the processes (pid -> role, or (pid, role) pairs) is an LLM engine's
    scheduler."""
    named = roles.values() if isinstance(roles, dict) else (r for _pid, r in roles)
    return any(r.startswith(ENGINE_SCHEDULERS) for r in named)


def engine_role(cmdline: str) -> str | None:
    """The role of an LLM engine's process (vLLM, SGLang) from its command line or the title
    the engine set; None for any other process."""
    text = cmdline.strip()
    m = _TITLE_RE.match(text)
    if m is not None:
        title = f"{m.group(1)}::{m.group(2)}"
        for known, role in ENGINE_TITLES:
            if title.lower() == known.lower():
                rank = (m.group(3) or "").lower().replace("_", " ")
                return f"{role} {rank}" if rank else role
    words = text.split()
    program = words[0].rsplit("/", 1)[-1] if words else ""
    if program == "vllm" and "serve" in words[1:3]:
        return "vllm api"
    for part, role in ENGINE_COMMANDS:
        if any(w == part or w.startswith(part + ".") for w in words[:4]):
            return role
    return None


def process_roles(session: Session) -> dict[int, str]:
    """pid -> role for ranks and merged recordings' processes; empty when neither applies
    (``role_of`` names a ``--children`` tree)."""
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
            known = session.processes.get(pid)
            role = role_of(pid, inp.target, known.cmdline if known else "", workers + 1)
            workers += role.startswith("worker")
            if role == "router" and len(inp.pids) == 1:
                role = "target"  # recorded without --children: one process
            out[pid] = f"{inp.host} {role}" if inp.host else role
    return out


def host_of(session: Session) -> dict[int, str]:
    """pid -> the host it was recorded on, where a merged recording says."""
    return {pid: inp.host for inp in merged_inputs(session) if inp.host for pid in inp.pids}
