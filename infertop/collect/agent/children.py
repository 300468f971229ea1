"""The in-process agent in the other processes of a session: the target's torch children
(``--children``) and the targets after the first (several PIDs on the command line).

``ChildAgents`` is one collector. Its thread looks for processes every ``scan_s``: the extra
targets, and with ``--children`` every descendant of every target (``/proc``). A process
that has imported torch (libtorch in its maps) gets an ``AgentAttach``, one injection at a
time (an armed agent, as under ``infertop run``, is simply used); so does a process on Python
3.10 or later without torch (an API process: the agent times its requests), but not
multiprocessing's helpers. Any other process is looked at again now and then (a worker imports
torch after it starts). Its events are of
that process: op windows and allocator readings carry its pid, its stage spans stay on its
own threads, its hello (torch version) is not the target's, and the per-process statuses
are summed up in one status line, ``agents``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace

from infertop.collect.agent.attach import AgentAttach
from infertop.collect.agent.client import AgentConfig, RawCallSamples
from infertop.collect.agent.snapshot import is_snapshot_note
from infertop.collect.tree import descendants, gone
from infertop.model.engine import EngineStats
from infertop.model.events import (
    AllocatorReading,
    CollectorStatus,
    Event,
    GcPause,
    GenerationCall,
    LoopLag,
    OpWindow,
    StageSpan,
)
from infertop.model.host_memory import ObjectCensus

NO_TORCH_RECHECK_S = 5.0  # a process without torch is looked at again after this long
MAX_AGENTS = 16  # a pool of hundreds of workers gets agents in the first ones only
RETRY_KINDS = ("timeout", "busy")  # injections worth trying again, up to TRIES in all
TRIES = 3
RETRY_S = 5.0


#: multiprocessing's helpers: never worth an agent
HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _wants_agent(pid: int) -> bool | None:
    """Whether ``pid`` gets an agent: it has imported torch (ops, memory), or it runs Python
    3.10 or later, where the agent times the entry points it knows with no flags (an API
    process's requests: ``sys.monitoring`` from 3.12, wrappers before) and its pauses. None
    when it is gone (or unreadable)."""
    from infertop.agent.inject import has_torch, python_info  # the injector: not start-up's
    from infertop.collect.tree import read_cmdline

    try:
        if has_torch(pid):
            return True
        if any(h in read_cmdline(pid) for h in HELPERS):
            return False
        info = python_info(pid)
    except OSError:
        return None
    return info is not None and info.version >= (3, 10)


class ChildAgents:
    name = "agents"

    def __init__(
        self,
        roots: list[int],
        config: AgentConfig,
        *,
        extra_targets: Sequence[int] = (),
        children: bool = True,
        scan_s: float = 1.0,
        inject_timeout: float = 5.0,
        max_agents: int = MAX_AGENTS,
    ) -> None:
        self.roots = list(roots)  # every target given: their descendants are followed
        self.extra_targets = list(extra_targets)  # targets that get an agent here (not the first)
        self.children = children
        self.config = config
        self.scan_s = scan_s
        self.inject_timeout = inject_timeout
        self.max_agents = max_agents
        self._attaches: dict[int, AgentAttach] = {}
        self._states: dict[int, CollectorStatus] = {}  # pid -> its agent's latest status
        self._later: dict[int, float] = {}  # no torch yet: pid -> when to look again
        self._tries: dict[int, int] = {}  # injections tried per pid
        self._failed_at: dict[int, float] = {}  # when a failure worth retrying was seen
        self._ended: set[int] = set()
        self._skipped = 0  # processes past max_agents
        self._said = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def follow(self, pids: list[int]) -> None:
        """The targets are ``pids``, a list that changes (``watch --match``): each one that
        appears gets an agent as an extra target does."""
        self.roots = pids
        self.extra_targets = pids

    # -- Collector protocol -----------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="infertop-agents", daemon=True)
        self._thread.start()

    def poll(self) -> list[Event]:
        with self._lock:
            attaches = list(self._attaches.items())
        out: list[Event] = []
        for pid, attach in attaches:
            for ev in attach.poll():
                tagged = self._tag(pid, ev)
                if tagged is not None:
                    out.append(tagged)
        summary = self._summary()
        if summary is not None:
            out.append(summary)
        return out

    def profile_now(self) -> None:
        """A profiler window now in every process that has an agent (``watch``'s incidents)."""
        with self._lock:
            attaches = list(self._attaches.values())
        for attach in attaches:
            attach.profile_now()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.inject_timeout + 3)
        with self._lock:
            attaches = list(self._attaches.values())
        stoppers = [threading.Thread(target=a.stop, daemon=True) for a in attaches]
        for t in stoppers:  # each detaches in its own time: together, not one after another
            t.start()
        for t in stoppers:
            t.join(timeout=self.inject_timeout + 4)

    # -- events -----------------------------------------------------------------------------
    def _tag(self, pid: int, ev: Event) -> Event | None:
        """An event of the agent in ``pid``, as the session should see it."""
        if isinstance(
            ev,
            (OpWindow, AllocatorReading, GcPause, LoopLag, RawCallSamples, GenerationCall, ObjectCensus, EngineStats),
        ):
            return replace(ev, pid=pid)
        if isinstance(ev, StageSpan):
            return ev  # thread ids name their process
        if isinstance(ev, CollectorStatus):
            note = ev.message.rsplit("; ", 1)[-1]
            if is_snapshot_note(note):  # said as it is, not summed up: where a snapshot went
                return replace(ev, collector=self.name, message=f"pid {pid}: {note}")
            self._states[pid] = ev
        return None  # its hello (torch version) is not the target's; statuses are summed up

    def _summary(self) -> CollectorStatus | None:
        """One status for every process's agent, when it changed: how many run, and why the
        others do not."""
        states = dict(self._states)
        if not states and not self._skipped:
            return None
        running = [p for p, s in states.items() if s.state == "running" and p not in self._ended]
        others = [
            f"pid {p}: {s.message or s.state}"
            for p, s in sorted(states.items())
            if s.state != "running" and p not in self._ended
        ]
        parts = [f"{len(running)} of {len(states)} processes" if states else "none yet"]
        if self._ended:
            parts.append(f"{len(self._ended)} exited")
        if self._skipped:
            parts.append(f"{self._skipped} more not profiled (at most {self.max_agents})")
        message = ", ".join(parts) + ("; " + "; ".join(others[:3]) if others else "")
        if message == self._said:
            return None
        self._said = message
        live = [p for p in states if p not in self._ended]
        failed = bool(live) and all(states[p].state in ("failed", "unavailable") for p in live)
        state = "unavailable" if failed else ("running" if running or not live else "stopped")
        return CollectorStatus(time.time(), self.name, state, message)

    # -- the scanning thread ----------------------------------------------------------------
    def _candidates(self) -> list[int]:
        pids = list(self.extra_targets)
        if self.children:
            for root in list(self.roots):
                pids += descendants(root)
        return list(dict.fromkeys(pids))  # each once, in order

    def _retry(self, pid: int, attach: AgentAttach) -> bool:
        """Whether to try ``pid`` again: its injection timed out (its main thread was in a
        long C call: a worker blocked on its queue) or found the agent busy, a few times."""
        result = attach.result
        if result is None or getattr(result, "ok", True) or pid in self._ended:
            return False
        if getattr(result, "kind", "") not in RETRY_KINDS or self._tries.get(pid, 0) >= TRIES:
            return False
        failed = self._failed_at.setdefault(pid, time.monotonic())
        if time.monotonic() - failed < RETRY_S:
            return False
        del self._failed_at[pid]
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in self._candidates():
                if self._stop.is_set():
                    return
                self._consider(pid)
            for pid in gone([p for p in self._attaches if p not in self._ended]):
                self._ended.add(pid)
            self._stop.wait(self.scan_s)

    def _consider(self, pid: int) -> None:
        if time.monotonic() < self._later.get(pid, 0.0):
            return
        old = self._attaches.get(pid)
        if old is not None:
            if not self._retry(pid, old):
                return
            old.stop()
        if not _wants_agent(pid):
            self._later[pid] = time.monotonic() + NO_TORCH_RECHECK_S
            return
        if old is None and len(self._attaches) >= self.max_agents:
            self._later[pid] = float("inf")
            self._skipped += 1
            return
        attach = AgentAttach(pid, self.config, inject_timeout=self.inject_timeout)
        with self._lock:
            self._attaches[pid] = attach
        self._tries[pid] = self._tries.get(pid, 0) + 1
        attach.start()
        # one injection at a time: wait for this one's outcome before the next process
        deadline = time.monotonic() + self.inject_timeout + 3
        while attach.result is None and time.monotonic() < deadline:
            if self._stop.wait(0.05):
                return
