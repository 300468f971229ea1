"""The in-process agent's client: torch-profiler windows, stage spans and allocator readings.

Speaks docs/agent-protocol.md over the agent's Unix socket, on its own thread: connect, hello,
configure, start, then read pushed messages until ``stop`` (which sends ``detach``). Messages
become events: ``window`` → ``OpWindow``, ``spans`` → ``StageSpan``, ``allocator`` →
``AllocatorReading``, ``pauses`` → ``GcPause`` / ``LoopLag``, ``generations`` →
``GenerationCall``, ``samples`` → ``RawCallSamples`` (interned by the session into
``CallSamples``), ``hello`` → a ``TargetInfo`` that adds the torch version, ``status`` and every
failure → ``CollectorStatus(collector="agent")``. Nothing here raises out of ``poll``. The
framing, the socket's path and its checks are ``infertop.agent.protocol``'s, the agent's own.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from infertop.agent import protocol
from infertop.collect.agent.snapshot import collect_quietly, oom_snapshot_path, snapshot_answer
from infertop.collect.base import drain
from infertop.model.engine import engine_stats_from_wire
from infertop.model.events import (
    CollectorStatus,
    Event,
    Frame,
    GcPause,
    GenerationCall,
    LoopLag,
    OpWindow,
    StageSpan,
    TargetInfo,
)
from infertop.model.fields import decode_allocator, decode_op_window
from infertop.model.host_memory import ObjectCensus
from infertop.model.numbers import real, whole

PROTOCOL = protocol.VERSION
STATES = ("running", "stopped", "unavailable", "failed")
#: the agent's own status states that mean "no windows will come"; any other is "running"
NO_WINDOWS = {"no-profiler": "unavailable", "profiler-busy": "unavailable"}
TICK_S = 0.2  # how often the reader looks at the stop flag


@dataclass(frozen=True)
class AgentConfig:
    """What the client asks the agent for (``configure``). The defaults are the agent's own
    (measured: about 1 % of a busy target's throughput, docs/performance.md)."""

    window_s: float = 0.25  # length of one torch.profiler window
    period_s: float = 10.0  # a window starts every this many seconds
    record_shapes: bool = False
    #: every other window one model call profiled with profile_memory (the bytes its ops and
    #: stages allocate, its peak): off by default, see docs/performance.md
    profile_memory: bool = False
    max_events: int = 20_000  # a window is cut short (``truncated``) past this many events
    stage_functions: tuple[tuple[str, str], ...] = ()  # (stage, pattern), timed by the agent
    #: stacks a second of the threads inside stage calls (tail attribution); 0: none
    call_sample_hz: float = 100.0
    pauses: bool = True  # garbage-collection pauses and asyncio event-loop lag
    #: FILE_GLOB:FUNC_GLOB of the user's generation loops (Hugging Face generate is known)
    generate_functions: tuple[str, ...] = ()
    #: ``watch --oom-snapshot``: arm the agent's out-of-memory observer and copy each CUDA
    #: memory snapshot it writes into this folder (not part of ``configure``: its own command)
    oom_snapshot_dir: str | None = None

    def message(self) -> dict[str, Any]:
        return {
            "v": PROTOCOL,
            "cmd": "configure",
            "window_s": self.window_s,
            "period_s": self.period_s,
            "record_shapes": self.record_shapes,
            "profile_memory": self.profile_memory,
            "max_events": self.max_events,
            "stage_functions": [[s, p] for s, p in self.stage_functions],
            "call_sample_hz": self.call_sample_hz,
            "pauses": self.pauses,
            "generate_functions": list(self.generate_functions),
        }


# -- messages → events ------------------------------------------------------------------------
@dataclass(frozen=True)
class RawCallSamples:
    """The agent's call samples before interning: (thread id, unix time, stack root first)."""

    rate_hz: float
    samples: tuple[tuple[int, float, tuple[Frame, ...]], ...]
    gil_waits: tuple[tuple[float, float], ...] = ()
    pid: int = 0


def _call_samples(msg: dict[str, Any]) -> RawCallSamples:
    """A ``samples`` message: its frame and stack tables are its own (ids local to it)."""
    names = [(str(name), str(file)) for name, file in msg["frames"]]
    stacks = []
    for flat in msg["stacks"]:
        if not isinstance(flat, list) or len(flat) % 2:
            raise ValueError("a call-sample stack is not [frame, line, ...]")
        stacks.append(
            tuple(Frame(*names[whole(flat[i])], whole(flat[i + 1])) for i in range(0, len(flat), 2))
        )
    rows = tuple((whole(r[0]), real(r[1]), stacks[whole(r[2])]) for r in msg["samples"])
    waits = tuple((real(w[0]), real(w[1])) for w in msg.get("gil_waits", ()))
    return RawCallSamples(real(msg["rate_hz"]), rows, waits)


def _pauses(msg: dict[str, Any]) -> list[Event]:
    out: list[Event] = [
        GcPause(real(g[1]), real(g[2]), int(g[3]), whole(g[4]), whole(g[0])) for g in msg["gc"]
    ]
    out += [LoopLag(real(r[1]), real(r[2]), whole(r[0])) for r in msg["loop_lag"]]
    return out


def _generation(r: list[Any]) -> GenerationCall:
    """One row of a ``generations`` message (docs/agent-protocol.md): -1 / "" where unknown."""

    def known(x: Any) -> int | None:
        return None if int(x) < 0 else whole(x)

    t_first = real(r[2])
    return GenerationCall(
        whole(r[0]), real(r[1]), None if t_first < 0 else t_first, real(r[3]), known(r[4]),
        known(r[5]), known(r[6]), known(r[7]), str(r[8]) or None, whole(r[9]),
    )  # fmt: skip


def _census(msg: dict[str, Any]) -> ObjectCensus:
    """A ``census`` message (docs/agent-protocol.md): the target's heap by type and its longest
    containers."""

    def opt_int(x: Any) -> int | None:
        return None if x is None else whole(x)

    return ObjectCensus(
        real(msg["t"]), 0, whole(msg["objects"]), real(msg["cost_s"]),
        tuple((str(n), whole(k)) for n, k, *_ in msg["types"]),
        tuple(
            (whole(key), str(kind), whole(n), opt_int(size), None if name is None else str(name))
            for key, kind, n, size, name, *_ in msg["containers"]
        ),
    )  # fmt: skip


def convert(msg: dict[str, Any]) -> list[Event]:
    """Events for one pushed message; [] for types this client does not know (protocol: new
    types may appear). Raises ValueError (or TypeError, KeyError) when a known one is malformed."""
    kind = msg.get("type")
    if kind == "window":  # its fields are an op window's by name (model/fields.py)
        return [decode_op_window({**msg, "source": "agent", "pid": 0})]
    if kind == "spans":
        spans = msg["spans"]
        if not isinstance(spans, list):
            raise ValueError("spans is not a list")
        # bounded like a recording's numbers: a span the reader would call damage never gets in
        return [
            StageSpan(
                whole(r[0]), str(r[1]), real(r[2]), real(r[3]),
                str(r[4]) if len(r) > 4 and r[4] is not None else None,
                whole(r[5]) if len(r) > 5 and r[5] is not None else None,
            )  # fmt: skip
            for r in spans
        ]
    if kind == "pauses":
        return _pauses(msg)
    if kind == "generations":
        return [_generation(r) for r in msg["calls"]]
    if kind == "samples":
        return [_call_samples(msg)]  # type: ignore[list-item]
    if kind == "allocator":
        keys = ("t", "device", "allocated", "reserved", "peak_allocated", "alloc_retries", "ooms")
        return [decode_allocator([msg[k] for k in keys])]
    if kind == "census":
        return [_census(msg)]
    if kind == "engine":  # an LLM engine's scheduler, summed per engine (model/engine.py)
        return [engine_stats_from_wire(r) for r in msg["stats"]]
    if kind == "status":
        state = str(msg.get("state", "running"))
        state = state if state in STATES else NO_WINDOWS.get(state, "running")
        return [CollectorStatus(time.time(), "agent", state, str(msg["message"]))]
    return []


def hello_events(msg: dict[str, Any], target: TargetInfo | None = None) -> list[Event]:
    """The agent's hello: ``target`` with the torch version added (without a target, a
    ``TargetInfo`` with only torch set, which the session merges), and a running status.
    The agent's own pid is not used: in a container it differs from the one we attached to."""
    torch = msg.get("torch")
    torch = torch if isinstance(torch, str) else None
    info = replace(target, torch=torch or target.torch) if target else TargetInfo(None, torch=torch)
    agent = msg.get("agent")
    what = f"agent {agent}" if isinstance(agent, str) else "agent"
    what += f", torch {info.torch}" if info.torch else ", no torch in the target"
    what += ", CUDA" if msg.get("cuda") is True else ""
    return [info, CollectorStatus(time.time(), "agent", "running", f"{what}: starting")]


class _Ended(Exception):
    """The session with the agent is over: (state, message) for the status line."""

    def __init__(self, state: str, message: str) -> None:
        super().__init__(message)
        self.state = state
        self.message = message


class AgentCollector:
    """Client of one target's agent socket; a collector (start / poll / stop)."""

    name = "agent"

    def __init__(
        self,
        socket_path: str,
        config: AgentConfig | None = None,
        *,
        target: TargetInfo | None = None,
        client: str = "infertop",
        reply_timeout: float = 5.0,
    ) -> None:
        self.socket_path = socket_path
        self.config = config or AgentConfig()
        self.target = target  # the TargetInfo known at attach, re-emitted with torch filled in
        self.client = client
        self.reply_timeout = reply_timeout
        self.malformed = 0  # pushed messages skipped because they did not decode
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._reader = protocol.FrameDecoder()
        self._agent_state: str | None = None  # the state of the agent's last status message
        self._pending: list[dict[str, Any]] = []  # read along with a reply, not yet handled
        self._broken: _Ended | None = None  # raised once the messages before it are handled
        self._profiling = ""  # the running status once started ("torch.profiler 0.5 s every…")
        #: commands to send: "profile_now", or a message (memory_snapshot, oom_snapshot)
        self._asked: queue.SimpleQueue[str | dict[str, Any]] = queue.SimpleQueue()
        self._snapshot_dest: str | None = None  # where the snapshot asked for goes
        self.no_profile_now = False  # the agent said it has no profile_now (an older agent)
        #: the agent's answer to the last profile_now: {"started": bool, "reason"?: str}
        self.profile_now_answer: dict[str, Any] | None = None

    # -- Collector protocol -----------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None or self._stop.is_set():
            return
        self._thread = threading.Thread(target=self._run, name="infertop-agent", daemon=True)
        self._thread.start()

    def poll(self) -> list[Event]:
        return drain(self._events)

    def profile_now(self) -> None:
        """Ask the agent for a profiler window now, out of its cycle (``watch``'s incidents);
        sent from the connection thread. The agent keeps to its budget: it may say no
        (``profile_now_answer``); an agent that does not know the command is asked no more."""
        if not self.no_profile_now:
            self._asked.put("profile_now")

    def memory_snapshot(self, seconds: float, dest: str) -> None:
        """Ask the agent for a CUDA memory snapshot of ``seconds`` of history, to be written to
        ``dest`` (docs/memory-snapshot.md); what came of it is said in a status."""
        self._snapshot_dest = dest
        self._asked.put({"cmd": "memory_snapshot", "seconds": seconds})

    def stop(self) -> None:
        """Detach (the thread sends ``detach`` and waits briefly for its reply) and close."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.reply_timeout + 2 * TICK_S + 1.0)

    # -- the connection thread ------------------------------------------------------------------
    def _status(self, state: str, message: str) -> None:
        self._events.put(CollectorStatus(time.time(), self.name, state, message))

    def _run(self) -> None:
        try:
            self._session()
        except _Ended as end:
            self._status(end.state, end.message)
        except Exception as exc:  # noqa: BLE001 - a bug here must not kill infertop
            self._status("failed", f"agent client error: {type(exc).__name__}: {exc}")
        finally:
            if self._sock is not None:
                try:
                    self._sock.close()
                except OSError:
                    pass
                self._sock = None

    def _session(self) -> None:
        path = self.socket_path
        try:
            refused = protocol.check_socket(path)
        except FileNotFoundError:
            raise _Ended("unavailable", f"no agent socket at {path} (no agent in the target)") from None
        except OSError as exc:
            raise _Ended("failed", f"cannot look at {path}: {exc.strerror or exc}") from None
        if refused is not None:
            raise _Ended("failed", f"refusing the agent socket: {refused}")
        try:
            sock = self._sock = protocol.connect(path, timeout=self.reply_timeout)
        except OSError as exc:
            raise _Ended("failed", f"cannot connect to {path}: {exc.strerror or exc}") from None
        sock.settimeout(TICK_S)
        hello = self._request({"v": PROTOCOL, "cmd": "hello", "client": self.client}, "hello")
        for ev in hello_events(hello, self.target):
            self._events.put(ev)
        reply = self._request(self.config.message(), "ok", "configure")
        self._request({"v": PROTOCOL, "cmd": "start"}, "ok", "start")
        config = reply.get("config")
        eff = config if isinstance(config, dict) else {}
        window, period = eff.get("window_s"), eff.get("period_s")
        if not isinstance(window, (int, float)) or not isinstance(period, (int, float)):
            window, period = self.config.window_s, self.config.period_s
        self._profiling = f"torch.profiler {window:g} s every {period:g} s"
        if self._agent_state in (None, "running"):  # else the agent's word stands (no torch…)
            self._status("running", self._profiling)
        if self.config.oom_snapshot_dir:
            self._asked.put({"cmd": "oom_snapshot", "on": True})
        while not self._stop.is_set():
            for msg in self._next_messages():
                self._dispatch(msg)
            for cmd in drain(self._asked):
                self._ask(cmd)
        self._detach()

    def _ask(self, ask: str | dict[str, Any]) -> None:
        """Send a command whose refusal is an answer, not the end of the session (an older
        agent answers ``unknown command``); pushed messages meanwhile are dispatched."""
        fields = {"cmd": ask} if isinstance(ask, str) else ask
        cmd = str(fields["cmd"])
        if cmd == "profile_now" and self.no_profile_now:
            return
        self._send({"v": PROTOCOL, **fields})
        deadline = time.monotonic() + self.reply_timeout
        while time.monotonic() < deadline and not self._stop.is_set():
            msgs = self._next_messages()
            for i, msg in enumerate(msgs):
                kind = msg.get("type")
                if kind == "error" or (kind == "ok" and msg.get("cmd") == cmd):
                    self._pending = msgs[i + 1 :]
                    self._answered(cmd, msg)
                    return
                self._dispatch(msg)

    def _answered(self, cmd: str, msg: dict[str, Any]) -> None:
        if cmd != "profile_now":
            self._note(snapshot_answer(cmd, msg))
            return
        if msg.get("type") == "error":
            self.no_profile_now = True
            self.profile_now_answer = {"started": False, "reason": str(msg.get("message", "?"))}
            state = self._agent_state or "running"
            note = "this agent has no profile_now (an older agent): no extra window on incidents"
            self._status(state, f"{self._profiling}; {note}" if self._profiling else note)
            return
        self.profile_now_answer = {k: v for k, v in msg.items() if k in ("started", "reason")}

    def _detach(self) -> None:
        try:
            self._request({"v": PROTOCOL, "cmd": "detach"}, "ok", "detach", timeout=1.0)
        except _Ended:
            pass  # gone already, or slow to answer: closing the socket detaches as well
        raise _Ended("stopped", "detached")

    def _send(self, obj: dict[str, Any]) -> None:
        assert self._sock is not None
        try:
            self._sock.sendall(protocol.encode_msg(obj))
        except OSError as exc:
            raise _Ended("stopped", f"the agent closed the connection ({exc.strerror or exc})") from None

    def _request(
        self, obj: dict[str, Any], reply_type: str, cmd: str | None = None, timeout: float = 0.0
    ) -> dict[str, Any]:
        """Send a command and wait for its reply; pushed messages meanwhile are dispatched."""
        self._send(obj)
        name = obj["cmd"]
        deadline = time.monotonic() + (timeout or self.reply_timeout)
        while time.monotonic() < deadline:
            if self._stop.is_set() and name != "detach":
                self._detach()
            msgs = self._next_messages()
            for i, msg in enumerate(msgs):
                kind = msg.get("type")
                if kind == "error":
                    raise _Ended("failed", f"the agent refused {name}: {msg.get('message', '?')}")
                if kind == reply_type and (cmd is None or msg.get("cmd") == cmd):
                    self._pending = msgs[i + 1 :]
                    return msg
                self._dispatch(msg)
        raise _Ended("failed", f"no reply to {name} within {timeout or self.reply_timeout:g} s")

    def _next_messages(self) -> list[dict[str, Any]]:
        """Whatever complete messages arrive within one tick (maybe none). Raises ``_Ended``
        when the stream is over or broken, after the good messages before the break."""
        if self._pending:
            out, self._pending = self._pending, []
            return out
        if self._broken is not None:
            raise self._broken
        assert self._sock is not None
        try:
            data = self._sock.recv(1 << 16)
        except TimeoutError:
            return []
        except OSError as exc:
            raise _Ended("stopped", f"the agent connection broke ({exc.strerror or exc})") from None
        if not data:
            if self._reader.pending:
                raise _Ended("failed", "the agent closed the connection in the middle of a message")
            raise _Ended("stopped", "the agent closed the connection")
        try:
            return self._reader.feed(data)
        except protocol.ProtocolError as exc:
            self._broken = _Ended("failed", f"protocol error: {exc}; disconnected")
            return list(exc.before)

    def _note(self, note: str) -> None:
        """A line for the status that leaves the agent's state as it is."""
        state = self._agent_state or "running"
        self._status(state, f"{self._profiling}; {note}" if self._profiling else note)

    def _snapshot_written(self, msg: dict[str, Any]) -> None:
        """The agent wrote a CUDA memory snapshot: copied where it was asked to go (an OOM's
        into ``oom_snapshot_dir``, and the observer armed again)."""
        oom = msg.get("trigger") == "oom"
        dest = oom_snapshot_path(self.config.oom_snapshot_dir, msg) if oom else self._snapshot_dest
        if not oom:
            self._snapshot_dest = None
        self._note(collect_quietly(self.socket_path, msg, dest))
        if oom and self.config.oom_snapshot_dir:
            self._asked.put({"cmd": "oom_snapshot", "on": True})

    def _dispatch(self, msg: dict[str, Any]) -> None:
        state = self._agent_state or "running"  # a complaint does not change the agent's state
        if msg.get("type") == "memory_snapshot":
            self._snapshot_written(msg)
            return
        if msg.get("type") == "error":
            self._status(state, f"agent error: {msg.get('message', '?')}")
            return
        try:
            events = convert(msg)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            self.malformed += 1
            self._status(state, f"skipped {self.malformed} malformed agent message(s) ({exc})")
            return
        for ev in events:
            if isinstance(ev, CollectorStatus):
                self._agent_state = ev.state
            elif isinstance(ev, OpWindow) and self._agent_state not in (None, "running"):
                self._agent_state = "running"  # windows again (the target's own profiler ended)
                self._status("running", self._profiling)
            self._events.put(ev)
