"""The agent client against a tiny in-test agent (fake_agent.py) that speaks the protocol:
a good agent, a rude one, a dying one."""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest

from infertop.agent import protocol
from infertop.analysis.session import Session
from infertop.collect.agent.client import AgentCollector, AgentConfig
from infertop.model.events import (
    AllocatorReading,
    CollectorStatus,
    OpWindow,
    StageSpan,
    TargetInfo,
)
from tests.collect.fake_agent import FakeAgent, Script
from tests.collect.ops_data import allocator_message, make_allocator, make_op_window, window_message


def collect(c: AgentCollector, until: Callable[[list[Any]], bool], timeout: float = 5.0) -> list[Any]:
    """Poll (it must never block or raise) until ``until(events)`` or the timeout."""
    events: list[Any] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = time.monotonic()
        events += c.poll()
        assert time.monotonic() - t < 0.05  # poll never blocks
        if until(events):
            return events
        time.sleep(0.01)
    raise AssertionError(f"timed out; got {events}")


def statuses(events: list[Any]) -> list[CollectorStatus]:
    return [e for e in events if isinstance(e, CollectorStatus)]


def last_state(events: list[Any]) -> str | None:
    s = statuses(events)
    return s[-1].state if s else None


# -- a well-behaved agent ---------------------------------------------------------------------
RNG = random.Random(11)
WINDOWS = [make_op_window(RNG, 1_700_000_000.0 + 10 * i) for i in range(2)]
READING = make_allocator(1_700_000_001.0)


def good_agent(agent: FakeAgent, conn: socket.socket) -> None:
    agent.handshake(conn)
    agent.send(conn, {"v": 1, "type": "spans", "spans": [[7, "forward", 10.0, 10.05],
                                                         [7, "preprocess", 10.05, 10.07]]})
    for i, w in enumerate(WINDOWS):
        agent.send(conn, window_message(w, seq=i))
    agent.send(conn, allocator_message(READING))
    agent.send(conn, {"v": 1, "type": "kv-cache", "blocks": 12})  # unknown types are ignored
    agent.send(conn, {"v": 1, "type": "status", "state": "running", "message": "window cut short"})
    agent.until_detach(conn)


def test_handshake_sends_the_config_and_messages_become_events(agents) -> None:
    agent = agents(good_agent)
    cfg = AgentConfig(window_s=0.25, period_s=5.0, record_shapes=True, max_events=5000,
                      stage_functions=(("preprocess", "*server.py:encode_batch"),))  # fmt: skip
    c = AgentCollector(agent.path, cfg)
    c.start()
    events = collect(c, lambda ev: any(getattr(e, "message", "") == "window cut short" for e in ev))
    hello, configure, start = agent.received[:3]
    assert hello["client"].startswith("infertop")
    assert configure == {"v": 1, "cmd": "configure", "window_s": 0.25, "period_s": 5.0,
                         "record_shapes": True, "profile_memory": False, "max_events": 5000,
                         "stage_functions": [["preprocess", "*server.py:encode_batch"]],
                         "call_sample_hz": 100.0, "pauses": True, "generate_functions": []}  # fmt: skip
    assert start == {"v": 1, "cmd": "start"}
    assert TargetInfo(pid=None, torch="2.3.1") in events
    assert [e for e in events if isinstance(e, OpWindow)] == WINDOWS  # exact, source "agent"
    assert [e for e in events if isinstance(e, StageSpan)] == [
        StageSpan(7, "forward", 10.0, 10.05), StageSpan(7, "preprocess", 10.05, 10.07)
    ]
    assert [e for e in events if isinstance(e, AllocatorReading)] == [READING]
    msgs = [s.message for s in statuses(events)]
    assert any("torch 2.3.1" in m for m in msgs)
    assert "torch.profiler 0.25 s every 5 s" in msgs
    assert all(s.collector == "agent" and s.state == "running" for s in statuses(events))
    t = time.monotonic()
    c.stop()
    assert time.monotonic() - t < 2.0
    assert agent.received[-1] == {"v": 1, "cmd": "detach"}
    tail = c.poll()
    assert last_state(tail) == "stopped" and statuses(tail)[-1].message == "detached"
    c.stop()  # safe twice
    assert c.poll() == []


@pytest.mark.parametrize("given_target", [True, False])
def test_hello_fills_in_the_torch_version_and_keeps_the_attach_target(
    agents, given_target: bool
) -> None:
    agent = agents(good_agent)
    target = TargetInfo(4242, "python serve.py", "3.11.7", None, 1000.0)
    session = Session()
    session.apply(target)
    c = AgentCollector(agent.path, AgentConfig(), target=target if given_target else None)
    c.start()
    events = collect(c, lambda ev: any(isinstance(e, OpWindow) for e in ev))
    c.stop()
    infos = [e for e in events if isinstance(e, TargetInfo)]
    full = TargetInfo(4242, "python serve.py", "3.11.7", "2.3.1", 1000.0)
    assert infos == [full if given_target else TargetInfo(None, torch="2.3.1")]
    for ev in events:
        session.apply(ev)
    assert session.target == full
    assert len(session.op_windows) >= 1


def test_an_agent_without_torch_says_so_and_its_status_stands(agents) -> None:
    def script(agent: FakeAgent, conn: socket.socket) -> None:
        hello = agent.recv(conn)
        assert hello["cmd"] == "hello"
        agent.send(conn, {"v": 1, "type": "hello", "agent": "0.1.0", "pid": 7, "python": "3.12.1",
                          "torch": None, "cuda": False, "armed": True, "monitoring": True,
                          "all_threads": True})  # fmt: skip
        agent.recv(conn)
        agent.send(conn, {"v": 1, "type": "status", "state": "unavailable",
                          "message": "torch is not imported in the target"})  # fmt: skip
        agent.send(conn, {"v": 1, "type": "ok", "cmd": "configure", "config": {}})
        agent.recv(conn)
        agent.send(conn, {"v": 1, "type": "ok", "cmd": "start"})
        agent.until_detach(conn)

    agent = agents(script)
    c = AgentCollector(agent.path)
    c.start()
    time.sleep(0.5)
    events = c.poll()
    assert any("no torch" in s.message for s in statuses(events))
    assert last_state(events) == "unavailable"
    assert statuses(events)[-1].message == "torch is not imported in the target"
    c.stop()


# -- rude and dying agents: a status, never an exception or a hang ------------------------------
def after_start(then: Callable[[FakeAgent, socket.socket], None]) -> Script:
    def script(agent: FakeAgent, conn: socket.socket) -> None:
        agent.handshake(conn)
        agent.send(conn, window_message(WINDOWS[0]))
        then(agent, conn)

    return script


def _garbage(agent: FakeAgent, conn: socket.socket) -> None:
    conn.sendall(struct.pack(">I", 9) + b"\xff\xfenot js")
    conn.sendall(b"on")
    agent.until_closed(conn)


def _mid_frame(agent: FakeAgent, conn: socket.socket) -> None:
    conn.sendall(struct.pack(">I", 500) + b'{"v": 1, "type": "wind')


def _huge(agent: FakeAgent, conn: socket.socket) -> None:
    conn.sendall(struct.pack(">I", 0xFFFFFFF0))
    agent.until_closed(conn)


def _not_an_object(agent: FakeAgent, conn: socket.socket) -> None:
    agent.send(conn, [1, 2, 3])  # type: ignore[arg-type]
    agent.until_closed(conn)


def _newer_protocol(agent: FakeAgent, conn: socket.socket) -> None:
    agent.send(conn, {"v": 2, "type": "window"})
    agent.until_closed(conn)


def _hang_up(agent: FakeAgent, conn: socket.socket) -> None:
    conn.shutdown(socket.SHUT_RDWR)


@pytest.mark.parametrize(
    ("then", "state", "words"),
    [
        (_garbage, "failed", "not UTF-8 JSON"),
        (_mid_frame, "failed", "middle of a message"),
        (_huge, "failed", "limit"),
        (_not_an_object, "failed", "not a JSON object"),
        (_newer_protocol, "failed", "protocol version 2"),
        (_hang_up, "stopped", "closed the connection"),
    ],
)
def test_a_broken_connection_is_a_status(agents, then, state: str, words: str) -> None:
    agent = agents(after_start(then))
    c = AgentCollector(agent.path)
    c.start()
    events = collect(c, lambda ev: last_state(ev) in ("failed", "stopped"))
    assert [e for e in events if isinstance(e, OpWindow)] == [WINDOWS[0]]  # what came before
    assert last_state(events) == state
    assert words in statuses(events)[-1].message
    t = time.monotonic()
    c.stop()
    c.stop()
    assert time.monotonic() - t < 1.0 and c.poll() == []


def test_malformed_messages_are_skipped_and_the_next_ones_still_arrive(agents) -> None:
    def script(agent: FakeAgent, conn: socket.socket) -> None:
        agent.handshake(conn)
        bad = window_message(WINDOWS[0])
        bad["paths"] = [["aten::mm", "forward"]]  # a row cut short
        agent.send(conn, bad)
        agent.send(conn, {"v": 1, "type": "spans", "spans": [[1, "forward", "soon", None]]})
        agent.send(conn, {"v": 1, "type": "allocator", "t": 1.0})
        agent.send(conn, window_message(WINDOWS[1]))
        agent.until_detach(conn)

    agent = agents(script)
    c = AgentCollector(agent.path)
    c.start()
    events = collect(c, lambda ev: any(isinstance(e, OpWindow) for e in ev))
    assert [e for e in events if isinstance(e, OpWindow)] == [WINDOWS[1]]
    assert c.malformed == 3
    assert "skipped 3 malformed" in statuses(events)[-1].message
    assert last_state(events) == "running"
    c.stop()


def test_an_error_reply_to_configure_fails_with_its_message(agents) -> None:
    def script(agent: FakeAgent, conn: socket.socket) -> None:
        agent.recv(conn)
        agent.send(conn, {"v": 1, "type": "hello", "agent": "0.1.0", "pid": 7, "python": "3.11",
                          "torch": "2.3.1", "cuda": False, "armed": False, "monitoring": False,
                          "all_threads": True})  # fmt: skip
        agent.recv(conn)
        agent.send(conn, {"v": 1, "type": "error", "message": "window_s must be > 0"})
        agent.until_closed(conn)

    agent = agents(script)
    c = AgentCollector(agent.path, AgentConfig(window_s=0.0))
    c.start()
    events = collect(c, lambda ev: last_state(ev) == "failed")
    assert "refused configure: window_s must be > 0" in statuses(events)[-1].message
    c.stop()


def test_a_silent_agent_times_out_and_stop_does_not_wait_for_it(agents) -> None:
    agent = agents(lambda a, conn: a.until_closed(conn))
    c = AgentCollector(agent.path, reply_timeout=0.5)
    c.start()
    events = collect(c, lambda ev: last_state(ev) == "failed")
    assert "no reply to hello within 0.5 s" in statuses(events)[-1].message
    c.stop()

    agent2 = agents(lambda a, conn: a.until_closed(conn))
    c2 = AgentCollector(agent2.path)  # 5 s reply timeout: stop must not wait for it
    c2.start()
    time.sleep(0.3)
    t = time.monotonic()
    c2.stop()
    assert time.monotonic() - t < 2.0
    assert last_state(c2.poll()) == "stopped"


def test_no_socket_is_unavailable_and_a_loose_directory_is_refused(agents, tmp_path) -> None:
    c = AgentCollector(str(tmp_path / "nope" / "agent-1.sock"))
    c.start()
    events = collect(c, lambda ev: bool(statuses(ev)))
    assert last_state(events) == "unavailable" and "no agent socket" in events[-1].message
    c.stop()

    agent = agents(good_agent, mode=0o755)
    assert protocol.check_socket(agent.path) is not None
    c = AgentCollector(agent.path)
    c.start()
    events = collect(c, lambda ev: bool(statuses(ev)))
    assert last_state(events) == "failed" and "has mode 755" in events[-1].message
    c.stop()
    assert agent.received == []  # never connected


def test_stop_before_start_and_start_twice_are_harmless(agents) -> None:
    c = AgentCollector("/nonexistent/agent-1.sock")
    c.stop()
    c.start()  # after stop: nothing starts
    assert c.poll() == []
    agent = agents(good_agent)
    c = AgentCollector(agent.path)
    c.start()
    c.start()
    collect(c, lambda ev: any(isinstance(e, OpWindow) for e in ev))
    c.stop()
    assert sum(1 for m in agent.received if m["cmd"] == "hello") == 1


# -- framing --------------------------------------------------------------------------------------
def test_profile_now_asks_for_a_window_and_its_answer_is_kept(agents) -> None:
    def script(agent: FakeAgent, conn: socket.socket) -> None:
        agent.handshake(conn)
        assert agent.recv(conn)["cmd"] == "profile_now"
        agent.send(conn, window_message(WINDOWS[0], seq=1))  # pushed before the answer
        agent.send(conn, {"v": 1, "type": "ok", "cmd": "profile_now", "started": True})
        assert agent.recv(conn)["cmd"] == "profile_now"
        agent.send(conn, {"v": 1, "type": "ok", "cmd": "profile_now", "started": False,
                          "reason": "a window is open"})  # fmt: skip
        agent.until_detach(conn)

    agent = agents(script)
    c = AgentCollector(agent.path, AgentConfig())
    c.start()
    collect(c, lambda ev: last_state(ev) == "running" and "every" in statuses(ev)[-1].message)
    c.profile_now()
    events = collect(c, lambda ev: any(isinstance(e, OpWindow) for e in ev))
    assert [e for e in events if isinstance(e, OpWindow)] == [WINDOWS[0]]
    deadline = time.monotonic() + 5
    while c.profile_now_answer != {"started": True} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert c.profile_now_answer == {"started": True}
    c.profile_now()
    while c.profile_now_answer.get("started") is not False and time.monotonic() < deadline:
        time.sleep(0.01)
    assert c.profile_now_answer == {"started": False, "reason": "a window is open"}
    c.stop()
    assert last_state(c.poll()) == "stopped"


def test_an_older_agent_without_profile_now_is_not_broken_by_it(agents) -> None:
    def script(agent: FakeAgent, conn: socket.socket) -> None:
        agent.handshake(conn)
        msg = agent.recv(conn)
        assert msg["cmd"] == "profile_now"
        agent.send(conn, {"v": 1, "type": "error", "message": "unknown command 'profile_now'"})
        agent.send(conn, {"v": 1, "type": "spans", "spans": [[7, "forward", 10.0, 10.05]]})
        agent.until_detach(conn)  # a second profile_now would end up here: it must not come

    agent = agents(script)
    c = AgentCollector(agent.path, AgentConfig(period_s=5.0))
    c.start()
    collect(c, lambda ev: last_state(ev) == "running" and "every" in statuses(ev)[-1].message)
    c.profile_now()
    events = collect(c, lambda ev: any(isinstance(e, StageSpan) for e in ev))
    said = statuses(events)[-1]
    assert said.state == "running"  # the session goes on
    assert said.message.startswith("torch.profiler 0.25 s every 5 s; this agent has no profile_now")
    assert c.no_profile_now
    c.profile_now()  # not sent again
    time.sleep(0.3)
    c.stop()
    assert [m["cmd"] for m in agent.received].count("profile_now") == 1
    assert agent.received[-1]["cmd"] == "detach"
    assert last_state(c.poll()) == "stopped"


# -- through the live pipeline into a recording and back ------------------------------------------
def test_live_source_records_what_the_agent_sends_and_replay_shows_it(agents, tmp_path) -> None:
    from infertop.analysis.snapshot import build_snapshot
    from infertop.config import Config
    from infertop.record.reader import read_recording
    from infertop.report.build import build_report
    from infertop.sources import LiveSource, ReplaySource

    agent = agents(good_agent)
    target = TargetInfo(4242, "python serve.py", "3.11.7", None, 1_700_000_000.0)
    path = str(tmp_path / "live.infertop")
    src = LiveSource(target, Config(), collectors=[AgentCollector(agent.path, target=target)],
                     record_path=path)  # fmt: skip
    src.start()
    deadline = time.monotonic() + 5
    while len(src.session.op_windows) < 2 and time.monotonic() < deadline:
        src.pump()
        time.sleep(0.02)
    src.stop()
    live = build_snapshot(src.session)
    assert live.torch.windows == 2 and live.target.torch == "2.3.1"
    assert src.session.statuses["agent"].state == "stopped"

    rec = read_recording(path)
    assert rec.warning is None
    replay = ReplaySource(rec, Config())
    snap = build_snapshot(replay.session, t=replay.t)
    assert snap.torch.windows == 2 and snap.torch.ops == live.torch.ops and snap.target.torch == "2.3.1"
    assert snap.torch.allocator == READING
    rep = build_report(snap, "recording", path)
    assert rep["ops"] and rep["gpu"]["memory"]["reserved"] == READING.reserved
