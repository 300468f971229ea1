"""Getting the in-process agent for a live session, off the UI's critical path.

``AgentAttach`` is a collector: ``start`` returns at once; its thread injects the agent (or
finds an armed one) and then runs an ``AgentCollector`` on its socket, whose events it passes
on. Every outcome is a ``CollectorStatus`` for the status line: injecting, running (armed /
injected by ptrace / gdb / remote_exec, and how long the target was held), or unavailable
with the injector's reason — py-spy carries on either way.
"""

from __future__ import annotations

import queue
import threading
import time

from infertop.agent import protocol
from infertop.collect.agent.client import AgentCollector, AgentConfig
from infertop.collect.base import drain
from infertop.model.events import CollectorStatus, Event, TargetInfo


def _detach(path: str) -> None:
    """Send ``detach`` to an agent we will not use (it also leaves by itself when idle)."""
    try:
        sock = protocol.connect(path, timeout=1.0)
    except OSError:
        return
    try:
        protocol.send_msg(sock, {"v": 1, "cmd": "detach"})
        sock.settimeout(1.0)
        protocol.recv_msg(sock)
    except (OSError, protocol.ProtocolError):
        pass
    finally:
        sock.close()


class AgentAttach:
    name = "agent"

    def __init__(
        self,
        pid: int,
        config: AgentConfig,
        target: TargetInfo | None = None,
        inject_timeout: float = 5.0,
    ) -> None:
        self.pid = pid
        self.config = config
        self.target = target
        self.inject_timeout = inject_timeout
        self.result: object | None = None  # the InjectResult, once known
        self._inner: AgentCollector | None = None
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _status(self, state: str, message: str) -> None:
        self._events.put(CollectorStatus(time.time(), self.name, state, message))

    def start(self) -> None:
        if self._thread is not None:
            return
        self._status("running", "injecting the agent…")
        self._thread = threading.Thread(target=self._run, name="infertop-inject", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from infertop.agent.inject import inject  # here: the injector is not start-up's

        # torch or not: without it the agent still times the stage calls (the rules', an ASGI
        # app's requests) and says what paused the process (GC, event-loop lag)
        res = inject(self.pid, timeout=self.inject_timeout, require_torch=False)
        self.result = res
        if not res.ok or not res.socket_path:
            self._status("unavailable", res.reason or "the agent could not be started")
            return
        with self._lock:
            if self._stop.is_set():  # we quit while injecting: tell the new agent to go
                _detach(res.socket_path)
                return
            held = f", target held {1000 * res.freeze_s:.0f} ms" if res.freeze_s else ""
            how = "armed" if res.method == "armed" else f"injected by {res.method}{held}"
            self._status("running", f"{how}; connecting…")
            self._inner = AgentCollector(res.socket_path, self.config, target=self.target)
            self._inner.start()

    def poll(self) -> list[Event]:
        out: list[Event] = drain(self._events)
        inner = self._inner
        if inner is not None:
            out += inner.poll()
        return out

    def profile_now(self) -> None:
        """A profiler window now, when the agent is connected (``AgentCollector.profile_now``)."""
        inner = self._inner
        if inner is not None:
            inner.profile_now()

    def memory_snapshot(self, seconds: float, dest: str) -> None:
        """A CUDA memory snapshot to ``dest`` (``AgentCollector.memory_snapshot``); before the
        agent is connected, a status says there is none to ask."""
        inner = self._inner
        if inner is not None:
            inner.memory_snapshot(seconds, dest)
        else:
            state = "unavailable" if self.result is not None else "running"  # or injecting
            self._status(state, "no CUDA memory snapshot: the agent is not connected")

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            inner = self._inner
        if inner is not None:
            inner.stop()
            for ev in inner.poll():
                self._events.put(ev)
        if self._thread is not None:
            self._thread.join(timeout=self.inject_timeout + 3)
