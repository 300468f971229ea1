"""CUDA memory snapshots, the host's side (docs/memory-snapshot.md), on a recorded fixture
(tests/fixtures/memory_snapshot/snapshot.pickle, made by hand in torch's documented format:
no GPU here) and a scripted agent; and the agent's part driven with a stand-in torch."""

from __future__ import annotations

import os
import pickle
import sys
import time
import types
from pathlib import Path

import pytest

from infertop.agent.payload import snapshot as agent_snapshot
from infertop.collect.agent import snapshot
from infertop.collect.agent.client import AgentCollector, AgentConfig
from infertop.errors import BadInputFile, InfertopError, TargetUnsupported
from infertop.model.events import CollectorStatus, StageSpan
from tests.collect.fake_agent import FakeAgent
from tests.support.cli import run_cli

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "memory_snapshot" / "snapshot.pickle"
MIB = 1 << 20


def test_the_fixture_is_read_without_unpickling_objects():
    s = snapshot.read_summary(FIXTURE.read_bytes())
    assert (s.segments, s.blocks, s.trace_entries, s.devices, s.ooms) == (2, 5, 7, 2, 1)
    assert s.reserved_bytes == 22 * MIB
    assert s.allocated_bytes == 12 * MIB + 512
    assert snapshot.describe(s) == (
        "2 segment(s), 22.0 MiB reserved, 12.0 MiB allocated, 7 history entries, "
        "1 out-of-memory event(s)"
    )


def test_pytorchs_own_viewer_code_reads_the_fixture():
    """What PyTorch's memory viewer is built from (torch.cuda._memory_viz) takes the fixture:
    the fixture is the format a GPU run writes, not a lookalike of ours."""
    viz = pytest.importorskip("torch.cuda._memory_viz")
    snap = pickle.loads(FIXTURE.read_bytes())  # our own file, not a target's
    assert "segments" in snap and "device_traces" in snap
    assert "<html" in viz.trace_plot(snap).lower()
    assert "<html" in viz.segment_plot(snap).lower()


class _Boom:
    def __reduce__(self):
        return (os.getpid, ())


@pytest.mark.parametrize(
    "data",
    [
        pickle.dumps({"segments": [], "device_traces": [[_Boom()]]}),
        b"not a pickle",
        pickle.dumps([1]),
    ],
)
def test_anything_else_is_refused_and_nothing_in_it_runs(data):
    with pytest.raises(BadInputFile, match="not a PyTorch memory snapshot"):
        snapshot.read_summary(data)


def _serve_snapshot(
    reply: dict, file_bytes: bytes | None = None, name: str = "memsnap-4242-1.pickle"
):
    """An agent that answers hello, then ``memory_snapshot`` with ``reply``, then (when it
    started) writes ``file_bytes`` into its folder and says where."""

    def script(agent: FakeAgent, conn) -> None:
        assert agent.recv(conn)["cmd"] == "hello"
        agent.send(conn, {"type": "hello", "v": 1, "agent": "fake", "pid": 7, "cuda": True})
        ask = agent.recv(conn)
        assert ask["cmd"] == "memory_snapshot"
        agent.send(conn, {"v": 1, "type": "allocator", "t": 1.0})  # pushed meanwhile: skipped
        agent.send(
            conn,
            {"v": 1, "type": "ok", "cmd": "memory_snapshot", "seconds": ask["seconds"], **reply},
        )
        if reply.get("started") and file_bytes is not None:
            path = os.path.join(agent.dir, name)
            with open(path, "wb") as fh:
                fh.write(file_bytes)
            agent.send(conn, {"v": 1, "type": "memory_snapshot", "trigger": "request",
                              "path": "/tmp/infertop-0/" + name, "bytes": len(file_bytes)})  # fmt: skip
        agent.recv(conn)  # detach, in every case

    return script


def test_a_snapshot_is_copied_unchanged_and_the_agents_copy_removed(agents, tmp_path):
    data = FIXTURE.read_bytes()
    agent = agents(_serve_snapshot({"started": True}, data))
    said: list[str] = []
    out = tmp_path / "snap.pickle"
    summary = snapshot.take(agent.path, 4242, 0.5, str(out), progress=said.append)
    assert out.read_bytes() == data  # PyTorch's pickle, byte for byte
    assert summary.segments == 2
    assert not os.path.exists(os.path.join(agent.dir, "memsnap-4242-1.pickle"))
    assert any("recording the CUDA allocator's history for 0.5 s" in s for s in said)
    agent.thread.join(10)
    assert agent.error is None
    assert [m["cmd"] for m in agent.received] == ["hello", "memory_snapshot", "detach"]
    assert agent.received[1]["seconds"] == 0.5


def test_no_cuda_in_the_target_is_said_plainly(agents, tmp_path):
    reason = agent_snapshot.NO_CUDA + " (this torch is built without CUDA)"
    agent = agents(_serve_snapshot({"started": False, "why": "no-cuda", "reason": reason}))
    with pytest.raises(TargetUnsupported) as err:
        snapshot.take(agent.path, 4242, 1.0, str(tmp_path / "x.pickle"))
    assert err.value.message == reason
    assert err.value.exit_code == 4
    assert not (tmp_path / "x.pickle").exists()
    agent.thread.join(10)
    assert agent.received[-1]["cmd"] == "detach"


@pytest.mark.parametrize("name", ["../../etc/passwd", "memsnap-1-1.pickle.tmp", "agent-1.sock"])
def test_only_the_agents_own_snapshot_files_are_read(agents, tmp_path, name):
    agent = agents(_serve_snapshot({"started": True}, b"x", name=os.path.basename(name)))
    with pytest.raises(InfertopError, match="unexpected snapshot file"):
        snapshot.take(agent.path, 4242, 0.1, str(tmp_path / "x.pickle"))


def test_a_link_in_the_agents_folder_is_not_followed(agents, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("not yours")
    folder = tmp_path / "agentdir"
    folder.mkdir()
    (folder / "memsnap-1-1.pickle").symlink_to(secret)
    with pytest.raises(InfertopError, match="cannot open"):
        snapshot.collect(str(folder / "agent-1.sock"), "memsnap-1-1.pickle", str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()


# -- the command's errors -------------------------------------------------------------------


def test_command_errors_have_one_message_and_their_exit_code(tmp_path):
    gone = run_cli("memory-snapshot", "999999999", "-o", str(tmp_path / "s.pickle"))
    assert gone.returncode == 3 and "no process with pid 999999999" in gone.stderr
    bad = run_cli("memory-snapshot", str(os.getpid()), "-o", "x", "--seconds", "-1")
    assert bad.returncode == 2 and "--seconds -1 is out of range" in bad.stderr
    nowhere = run_cli("memory-snapshot", str(os.getpid()), "-o", str(tmp_path / "no" / "s"))
    assert nowhere.returncode == 2 and "its folder does not exist" in nowhere.stderr
    folder = run_cli("memory-snapshot", str(os.getpid()), "-o", str(tmp_path))
    assert folder.returncode == 2 and "it is a folder" in folder.stderr
    with pytest.raises(InfertopError) as err:
        snapshot.take(str(tmp_path / "agent-1.sock"), 1, 1.0, str(tmp_path / "s"))
    assert err.value.exit_code == 4 and "cannot reach the agent" in err.value.message


def test_help_says_where_the_file_opens():
    ran = run_cli("memory-snapshot", "--help")
    assert ran.returncode == 0
    assert "https://pytorch.org/memory_viz" in ran.stdout and "exit codes" in ran.stdout


# -- the agent's part, with a stand-in torch (the CUDA path cannot run here) ---------------------


class _FakeMemory:
    def __init__(self, snap):
        self.snap = snap
        self.calls: list = []

    def _record_memory_history(self, enabled, **kw):
        self.calls.append((enabled, kw))

    def _snapshot(self):
        return self.snap


def _fake_torch(snap, initialised=True):
    torch = types.ModuleType("torch")
    torch.autograd = object()
    torch._C = types.SimpleNamespace(
        _cuda_memorySnapshot=lambda *_: snap, _cuda_record_memory_history=lambda *_: None,
        _cuda_attach_out_of_memory_observer=lambda fn: observers.append(fn),
    )  # fmt: skip
    memory = _FakeMemory(snap)
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: initialised, memory=memory)
    observers: list = []
    return torch, memory, observers


class _Agent(agent_snapshot._SnapshotMixin):
    def __init__(self, folder):
        self.path = os.path.join(folder, "agent-1.sock")
        self.client = object()
        self.sent: list[dict] = []
        self._init_snapshot()

    def _send(self, obj):
        self.sent.append(obj)
        return True


def test_the_agent_records_then_snapshots_then_stops_recording(tmp_path, monkeypatch):
    snap = pickle.loads(FIXTURE.read_bytes())
    torch, memory, _ = _fake_torch(snap)
    monkeypatch.setitem(sys.modules, "torch", torch)
    agent = _Agent(str(tmp_path))
    agent._memory_snapshot_cmd({"cmd": "memory_snapshot", "seconds": 2, "max_entries": 5})
    assert agent.sent[-1] == {"type": "ok", "cmd": "memory_snapshot", "started": True,
                              "seconds": 2.0, "max_entries": 1000}  # fmt: skip
    assert memory.calls == [("all", {"context": "all", "stacks": "python", "max_entries": 1000})]
    agent._memory_snapshot_cmd({"cmd": "memory_snapshot"})
    assert agent.sent[-1]["why"] == "busy"
    agent._tick_snapshot(agent.snapshot_due - 1.0)  # not yet
    assert len(agent.sent) == 2
    agent._tick_snapshot(agent.snapshot_due)
    done = agent.sent[-1]
    assert done["type"] == "memory_snapshot" and done["trigger"] == "request"
    assert memory.calls[-1] == (None, {})
    with open(done["path"], "rb") as fh:
        assert pickle.load(fh) == snap and os.stat(done["path"]).st_mode & 0o777 == 0o600
    agent._end_snapshots()  # the client went without collecting it
    assert not os.path.exists(done["path"])


def test_the_agent_stops_recording_when_its_client_goes(tmp_path, monkeypatch):
    torch, memory, _ = _fake_torch({"segments": [], "device_traces": []})
    monkeypatch.setitem(sys.modules, "torch", torch)
    agent = _Agent(str(tmp_path))
    agent._memory_snapshot_cmd({"cmd": "memory_snapshot", "seconds": 60})
    agent._end_snapshots()
    assert memory.calls[-1] == (None, {}) and agent.snapshot_due is None


def test_the_agent_says_no_cuda_without_initialising_it(tmp_path, monkeypatch):
    torch, memory, _ = _fake_torch({}, initialised=False)
    monkeypatch.setitem(sys.modules, "torch", torch)
    agent = _Agent(str(tmp_path))
    agent._memory_snapshot_cmd({"cmd": "memory_snapshot"})
    assert agent.sent[-1]["why"] == "no-cuda"
    assert agent.sent[-1]["reason"].startswith(agent_snapshot.NO_CUDA)
    assert memory.calls == []


def test_the_oom_observer_writes_one_snapshot_per_arming(tmp_path, monkeypatch):
    snap = pickle.loads(FIXTURE.read_bytes())
    torch, _, observers = _fake_torch(snap)
    monkeypatch.setitem(sys.modules, "torch", torch)
    agent = _Agent(str(tmp_path))
    agent._oom_snapshot_cmd({"cmd": "oom_snapshot", "on": True})
    assert agent.sent[-1] == {"type": "ok", "cmd": "oom_snapshot", "armed": True}
    (observer,) = observers
    observer(0, 64 * MIB, 12 * MIB, 10 * MIB)  # as the allocator calls it, before it raises
    observer(0, 64 * MIB, 12 * MIB, 10 * MIB)  # a second OOM before re-arming: no file
    agent._tick_snapshot(0.0)
    (msg,) = [m for m in agent.sent if m.get("type") == "memory_snapshot"]
    assert msg["trigger"] == "oom" and msg["device"] == 0
    assert len(os.listdir(tmp_path)) == 1
    agent._oom_snapshot_cmd({"cmd": "oom_snapshot", "on": True})  # re-armed: not attached twice
    assert len(observers) == 1
    agent._end_snapshots()
    assert os.path.exists(msg["path"])  # an OOM's file waits for a client


# -- inside a live session: watch --oom-snapshot and the UI's key ----------------------------------


def _poll_until(c, predicate, timeout: float = 10.0) -> list:
    events: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events += c.poll()
        if predicate(events):
            return events
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout:g} s: {[getattr(e, 'message', e) for e in events]}")


def _said(events, text: str) -> bool:
    return any(isinstance(e, CollectorStatus) and text in e.message for e in events)


def test_watch_oom_snapshot_arms_the_agent_and_copies_what_it_writes(agents, tmp_path):
    data = FIXTURE.read_bytes()

    def script(agent: FakeAgent, conn) -> None:
        agent.handshake(conn)
        assert agent.recv(conn) == {"v": 1, "cmd": "oom_snapshot", "on": True}
        agent.send(conn, {"v": 1, "type": "ok", "cmd": "oom_snapshot", "armed": True})
        (Path(agent.dir) / "memsnap-7-1.pickle").write_bytes(data)  # the observer's file
        agent.send(conn, {"v": 1, "type": "memory_snapshot", "trigger": "oom", "device": 0,
                          "t": 1765000000.0, "path": "/tmp/infertop-0/memsnap-7-1.pickle",
                          "bytes": len(data)})  # fmt: skip
        assert agent.recv(conn)["cmd"] == "oom_snapshot"  # armed again for the next one
        agent.send(conn, {"v": 1, "type": "ok", "cmd": "oom_snapshot", "armed": True})
        agent.until_detach(conn)

    agent = agents(script)
    c = AgentCollector(agent.path, AgentConfig(oom_snapshot_dir=str(tmp_path)))
    c.start()
    try:
        events = _poll_until(c, lambda ev: _said(ev, "out-of-memory snapshot written to"))
    finally:
        c.stop()
    assert _said(events, "a CUDA memory snapshot will be written on an out-of-memory error")
    written = tmp_path / "oom-snapshot-20251206T054640Z-pid7-dev0.pickle"
    assert written.read_bytes() == data
    assert _said(events, f"written to {written} (2 segment(s), 22.0 MiB reserved")
    assert not (Path(agent.dir) / "memsnap-7-1.pickle").exists()
    assert agent.error is None


def test_watch_oom_snapshot_on_a_target_without_cuda_says_so_and_goes_on(agents, tmp_path):
    def script(agent: FakeAgent, conn) -> None:
        agent.handshake(conn)
        assert agent.recv(conn)["cmd"] == "oom_snapshot"
        agent.send(conn, {"v": 1, "type": "ok", "cmd": "oom_snapshot", "armed": False,
                          "why": "no-cuda", "reason": agent_snapshot.NO_CUDA})  # fmt: skip
        agent.send(conn, {"v": 1, "type": "spans", "spans": [[7, "forward", 10.0, 10.05]]})
        agent.until_detach(conn)

    agent = agents(script)
    c = AgentCollector(agent.path, AgentConfig(oom_snapshot_dir=str(tmp_path)))
    c.start()
    try:
        events = _poll_until(c, lambda ev: any(isinstance(e, StageSpan) for e in ev))
    finally:
        c.stop()
    assert _said(events, "no snapshot on out-of-memory: " + agent_snapshot.NO_CUDA)
    assert [s.state for s in events if isinstance(s, CollectorStatus)][-1] == "running"
    assert list(tmp_path.iterdir()) == []


def test_a_snapshot_asked_for_in_a_live_session_is_written_where_asked(agents, tmp_path):
    data = FIXTURE.read_bytes()

    def script(agent: FakeAgent, conn) -> None:
        agent.handshake(conn)
        ask = agent.recv(conn)
        assert ask == {"v": 1, "cmd": "memory_snapshot", "seconds": 3.0}
        agent.send(conn, {"v": 1, "type": "ok", "cmd": "memory_snapshot", "started": True,
                          "seconds": 3.0})  # fmt: skip
        (Path(agent.dir) / "memsnap-7-1.pickle").write_bytes(data)
        agent.send(conn, {"v": 1, "type": "memory_snapshot", "trigger": "request",
                          "path": "/x/memsnap-7-1.pickle", "bytes": len(data)})  # fmt: skip
        agent.until_detach(conn)

    agent = agents(script)
    c = AgentCollector(agent.path, AgentConfig())
    c.start()
    dest = tmp_path / "session" / "memory-snapshot.pickle"
    dest.parent.mkdir()
    try:
        _poll_until(c, lambda ev: _said(ev, "every"))
        c.memory_snapshot(3.0, str(dest))
        events = _poll_until(c, lambda ev: _said(ev, "CUDA memory snapshot written to"))
    finally:
        c.stop()
    assert _said(events, "CUDA memory snapshot: recording 3 s of history")
    assert dest.read_bytes() == data


def test_watch_says_each_oom_snapshot_note_once_on_stderr(tmp_path):
    import io

    from infertop.config import Config
    from infertop.model.events import TargetInfo
    from infertop.watch.loop import Watch, WatchOptions

    err = io.StringIO()
    w = Watch(
        TargetInfo(os.getpid(), "python serve.py"), Config(), WatchOptions(out_dir=str(tmp_path)),
        [], out=io.StringIO(), err=err,
    )  # fmt: skip
    armed = "torch.profiler 0.25 s every 10 s; " + snapshot.snapshot_answer(
        "oom_snapshot", {"type": "ok", "armed": True}
    )
    written = "torch.profiler 0.25 s every 10 s; out-of-memory snapshot written to /d/x.pickle (…)"
    for message in (armed, armed, "torch.profiler 0.25 s every 10 s", written):
        w._batch([CollectorStatus(1.0, "agent", "running", message)])
    assert err.getvalue().splitlines() == [
        "infertop watch: a CUDA memory snapshot will be written on an out-of-memory error",
        "infertop watch: out-of-memory snapshot written to /d/x.pickle (…)",
    ]


def test_with_many_agents_each_snapshot_note_is_said_with_its_pid(tmp_path):
    from infertop.collect.agent.children import ChildAgents

    agents = ChildAgents([], AgentConfig(oom_snapshot_dir=str(tmp_path)))
    note = "out-of-memory snapshot written to /d/x.pickle (2 segment(s))"
    said = agents._tag(
        42, CollectorStatus(1.0, "agent", "running", f"torch.profiler 0.25 s; {note}")
    )
    assert isinstance(said, CollectorStatus)
    assert (said.collector, said.state, said.message) == ("agents", "running", f"pid 42: {note}")
    assert (
        agents._tag(42, CollectorStatus(1.0, "agent", "running", "torch.profiler 0.25 s")) is None
    )


def test_oom_snapshots_never_overwrite_one_another(tmp_path):
    msg = {"t": 1765000000.0, "device": 1, "path": "/tmp/infertop-0/memsnap-9-3.pickle"}
    first = snapshot.oom_snapshot_path(str(tmp_path), msg)
    assert first == str(tmp_path / "oom-snapshot-20251206T054640Z-pid9-dev1.pickle")
    Path(first).write_bytes(b"x")
    assert snapshot.oom_snapshot_path(str(tmp_path), msg) == first.replace(".pickle", "-2.pickle")
