"""What each process of a ``--children`` session does, from the stacks it shows: it serves
HTTP (``api``), runs the model (``inference``), tokenizes (``tokenizer``), waits for batches
(``batcher``), runs multiprocessing's manager server (``manager``), or watches its worker
processes (``supervisor``: uvicorn's, gunicorn's, torch elastic's, a serving framework's main
process); with the name of the serving framework whose code is on its stacks where one is
known (``litserve api``). Pure functions over a ``Session``; ``roles`` (shares.py) falls back
on the tree and the command line (``router``, ``worker N``) where this says nothing
(docs/processes.md)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import NamedTuple

from infertop.analysis.session import Session
from infertop.analysis.stages import IDLE, caught_waiting
from infertop.model.events import Frame

#: a frame whose file holds one of these serves HTTP (or gRPC): the process is an API
HTTP_FILES: tuple[str, ...] = (
    "/uvicorn/", "/starlette/", "/fastapi/", "/aiohttp/", "/gunicorn/", "/hypercorn/",
    "/werkzeug/", "/flask/", "/tornado/", "/sanic/", "/grpc/", "/http/server.py",
)  # fmt: skip
#: the ASGI frameworks among them: an app's code, which a process may run on requests that
#: another process served ...
ASGI_APP_FILES: tuple[str, ...] = ("/starlette/", "/fastapi/")
#: ... as a Ray Serve replica does (its proxy serves the HTTP): in a process with one of these
#: on its stacks, only the servers' files say it serves HTTP
ASGI_HOSTED_FILES: tuple[str, ...] = ("/ray/serve/_private/replica.py",)
#: a frame in one of these watches worker processes (it is also the server's code, so it is
#: tried before ``HTTP_FILES``)
SUPERVISOR_FILES: tuple[str, ...] = (
    "/uvicorn/supervisors/", "/gunicorn/arbiter.py", "/torch/distributed/elastic/",
)  # fmt: skip
#: multiprocessing's manager server (proxies' objects live in it), by its functions
MANAGER_FUNCTIONS: tuple[str, ...] = ("Server.serve_forever", "Server.accepter", "Server.serve_client")
#: serving frameworks, by a file of theirs on the stack: (part of the path, name)
FRAMEWORKS: tuple[tuple[str, str], ...] = (
    ("/litserve/", "litserve"),
    ("/ray/serve/", "ray serve"),
    ("/bentoml/", "bentoml"),
    ("/infinity_emb/", "infinity"),
    ("/vllm/", "vllm"),
    ("/text_generation_server/", "tgi"),
    ("triton_python_backend_utils", "triton"),
)
#: a process is named by its work only once it has this many active samples ...
MIN_ACTIVE = 10
#: ... and the stage it is named for holds at least this share of them
MIN_SHARE = 0.25
#: the role each stage's work gives a process, in the order they are tried
BY_STAGE: tuple[tuple[str, str], ...] = (
    ("forward", "inference"),
    ("preprocess", "tokenizer"),
    ("queue", "batcher"),
)


@dataclass
class Activity:
    """One process's signs: HTTP serving and a framework seen on any stack (CPU or wall
    windows: an idle API still waits in its server's loop), and its active samples by stage
    (CPU windows, as the process view counts them), but those of threads caught in a blocking
    wait: woken, or waiting for a CPU, they are not its work."""

    server: bool = False  # an HTTP server's files (HTTP_FILES but the ASGI apps')
    asgi: bool = False  # an ASGI framework's files
    hosted: bool = False  # it runs ASGI apps on requests another process served
    supervisor: bool = False
    manager: bool = False  # runs multiprocessing's manager server
    framework: str | None = None
    stages: dict[str, int] = field(default_factory=dict)
    #: its active ``forward`` samples with torch's code on the stack (it runs a model)
    model: int = 0

    @property
    def http(self) -> bool:
        """It serves HTTP (or gRPC)."""
        return self.server or (self.asgi and not self.hosted)

    @property
    def active(self) -> int:
        return sum(self.stages.values())


_SERVER_FILES = tuple(p for p in HTTP_FILES if p not in ASGI_APP_FILES)
#: a frame in torch's own files
TORCH_FILE = "/torch/"


class Signs(NamedTuple):
    """What one stack says of the process it was sampled in."""

    server: bool
    asgi: bool
    hosted: bool
    supervisor: bool
    manager: bool
    framework: str | None
    #: caught in a blocking wait (a reply thread in ``select``): not the process's work, though
    #: its stage may be ``queue``
    waiting: bool
    #: torch's code on it: the process runs a model here (not a handler named ``predict`` that
    #: awaits another process's, as LitServe's API does)
    torch: bool = False


def _signs(frames: list[Frame]) -> Signs:
    files = [f.file for f in frames]
    server = any(part in f for f in files for part in _SERVER_FILES)
    asgi = any(part in f for f in files for part in ASGI_APP_FILES)
    hosted = any(part in f for f in files for part in ASGI_HOSTED_FILES)
    supervisor = any(part in f for f in files for part in SUPERVISOR_FILES)
    manager = any(
        f.function in MANAGER_FUNCTIONS and f.file.endswith("/multiprocessing/managers.py")
        for f in frames
    )
    framework = next((name for part, name in FRAMEWORKS if any(part in f for f in files)), None)
    torch = any(TORCH_FILE in f for f in files)
    return Signs(server, asgi, hosted, supervisor, manager, framework, caught_waiting(frames), torch)


#: each symbol table's stacks' signs: a stack never changes once defined, and the roles are
#: asked for at every snapshot of a live session
_SIGNS: weakref.WeakKeyDictionary[object, dict[int, Signs]] = weakref.WeakKeyDictionary()


def activities(session: Session) -> dict[int, Activity]:
    """pid -> its Activity, for every process followed (empty without ``--children``)."""
    if not session.processes:
        return {}
    target = session.target.pid or 0
    owner = session.thread_pid
    out = {pid: Activity() for pid in session.processes}
    memo = _SIGNS.setdefault(session.symbols, {})

    def note(pid: int, sid: int, n: int, stage: str | None) -> None:
        """One stack's ``n`` samples; ``stage`` where they are active (a CPU window's)."""
        signs = memo.get(sid)
        if signs is None:
            signs = memo[sid] = _signs(session.symbols.stack_frames(sid))
        a = out.get(pid)
        if a is None:
            return
        a.server = a.server or signs.server
        a.asgi = a.asgi or signs.asgi
        a.hosted = a.hosted or signs.hosted
        a.supervisor = a.supervisor or signs.supervisor
        a.manager = a.manager or signs.manager
        a.framework = a.framework or signs.framework
        # a thread woken in its wait is not the process's work: a router's reply reader in
        # select has a few such samples a second, more on a busy machine, which made it a
        # "batcher" (12 in 8 s; the rule's 10)
        if stage is not None and stage != IDLE and not signs.waiting:
            a.stages[stage] = a.stages.get(stage, 0) + n
            if stage == "forward" and signs.torch:
                a.model += n

    for pid, folded in session.folded_by_pid.items():
        for sid, n in folded.stacks.items():
            note(pid, sid, n, session.stage_of(sid))
    for w in session.windows:
        for tid, sid, n in w.window.counts:
            note(owner.get(tid, target), sid, n, None if w.wall else session.stage_of(sid))
    return out


def role_by_activity(a: Activity, has_children: bool) -> str | None:
    """The role a process's own work gives it, or None where it says nothing."""
    role = None
    if a.supervisor and has_children:
        role = "supervisor"
    elif a.manager and not a.http:
        return "manager"  # multiprocessing's, whoever started it
    elif a.http:
        role = "api"
        if a.active >= MIN_ACTIVE and a.model >= MIN_SHARE * a.active:
            role = "api + inference"  # it serves and runs the model (a gunicorn sync worker)
    elif a.active >= MIN_ACTIVE:
        for stage, name in BY_STAGE:
            n = a.stages.get(stage, 0)
            if n >= MIN_SHARE * a.active and n == max(a.stages.values()):
                role = name
                break
    if role is None and a.framework and has_children and a.active < MIN_ACTIVE:
        role = "supervisor"  # a framework's main process, waiting on the ones it started
    if role is not None and a.framework:
        return f"{a.framework} {role}"
    return role


def activity_roles(session: Session) -> dict[int, str]:
    """pid -> role from its work, numbered where several share one (``inference 1``,
    ``inference 2``, in pid order); processes their work does not name are left out."""
    acts = activities(session)
    if not acts:
        return {}
    parents = {p.ppid for p in session.processes.values()}
    named = {}
    for pid, a in acts.items():
        role = role_by_activity(a, pid in parents)
        if role is not None:
            named[pid] = role
    seen: dict[str, int] = {}
    for role in named.values():
        seen[role] = seen.get(role, 0) + 1
    counter: dict[str, int] = {}
    out = {}
    for pid in sorted(named):
        role = named[pid]
        if seen[role] > 1:
            counter[role] = counter.get(role, 0) + 1
            role = f"{role} {counter[role]}"
        out[pid] = role
    return out
