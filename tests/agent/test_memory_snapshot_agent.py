"""CUDA memory snapshots through the real agent injected into a real CPU-only torch target:
no CUDA here, so the agent must say so plainly, start nothing, and leave (docs/memory-snapshot.md).
The CUDA path itself is checked on a GPU run (the same document says what it must check)."""

from __future__ import annotations

import os
import pickle
import signal

import pytest
from agenthelpers import Client, wait_until

from infertop.agent import protocol as P
from infertop.agent.inject import inject
from infertop.agent.payload.snapshot import NO_CUDA
from tests.support.cli import run_cli

pytestmark = pytest.mark.slow


def test_the_injected_agent_says_the_target_has_no_cuda(targets):
    target = targets(args=("--workers", "0"))
    res = inject(target.pid, timeout=30)
    assert res.ok, res.reason
    client = Client(res.socket_path)
    try:
        hello = client.call("hello", client="test")
        assert hello["cuda"] is False
        reply = client.call("memory_snapshot", seconds=1)
        assert reply["type"] == "ok" and reply["cmd"] == "memory_snapshot"
        assert reply["started"] is False and reply["why"] == "no-cuda"
        assert reply["reason"].startswith(NO_CUDA)
        armed = client.call("oom_snapshot", on=True)
        assert armed["armed"] is False and armed["reason"].startswith(NO_CUDA)
        bad = client.call("memory_snapshot", seconds="ten")
        assert bad["type"] == "error" and "memory_snapshot" in bad["message"]
        assert client.call("detach")["cmd"] == "detach"
    finally:
        client.close()
    # nothing was written, and the injected agent leaves with its socket
    assert wait_until(lambda: not os.path.exists(res.socket_path), timeout=30)
    folder = os.path.dirname(res.socket_path)
    mine = [
        n
        for n in (os.listdir(folder) if os.path.isdir(folder) else [])
        if n.startswith(f"memsnap-{target.pid}-")
    ]
    assert mine == []
    assert target.proc.poll() is None


def test_the_command_on_a_cpu_target_exits_4_with_one_message(targets, tmp_path):
    target = targets(args=("--workers", "0"))
    out = tmp_path / "snap.pickle"
    ran = run_cli("memory-snapshot", str(target.pid), "-o", str(out), "--seconds", "1")
    assert ran.returncode == 4, ran
    assert "the target has no CUDA device: a CUDA memory snapshot needs one" in ran.stderr
    assert not out.exists()
    assert wait_until(lambda: not os.path.exists(P.locate_socket(target.pid)), timeout=30)
    assert target.proc.poll() is None


# -- the CUDA path, through the real agent, on a stand-in torch (targets/fake_cuda_target.py) --
FIXTURE = os.path.join(
    os.path.dirname(__file__), "..", "fixtures", "memory_snapshot", "snapshot.pickle"
)


def _stand_in(targets):
    return targets("fake_cuda_target.py", args=("--fixture", os.path.abspath(FIXTURE)))


def test_a_snapshot_is_recorded_on_the_agents_thread_and_collected(targets, tmp_path):
    from infertop.collect.agent import snapshot

    target = _stand_in(targets)
    res = inject(target.pid, timeout=30, require_torch=False)
    assert res.ok, res.reason
    before = target.read_status()["main"]
    out = tmp_path / "snap.pickle"
    said: list[str] = []
    summary = snapshot.take(res.socket_path, target.pid, 1.0, str(out), progress=said.append)
    with open(FIXTURE, "rb") as fh:
        assert pickle.loads(out.read_bytes()) == pickle.load(fh)
    assert summary.segments == 2 and summary.ooms == 1
    # recording on for the snapshot, off after it; the target ran on meanwhile
    done = [["all", 100000], [None, None]]
    assert wait_until(lambda: target.read_status()["history"] == done, timeout=10)
    assert target.read_status()["main"] > before
    assert wait_until(lambda: not os.path.exists(res.socket_path), timeout=30)
    folder = os.path.dirname(res.socket_path)
    assert not [
        n
        for n in (os.listdir(folder) if os.path.isdir(folder) else [])
        if n.startswith(f"memsnap-{target.pid}-")
    ]


def test_an_oom_writes_one_snapshot_the_client_is_told_of(targets, tmp_path):
    from infertop.collect.agent import snapshot

    target = _stand_in(targets)
    res = inject(target.pid, timeout=30, require_torch=False)
    assert res.ok, res.reason
    client = Client(res.socket_path)
    try:
        client.call("hello", client="test")
        assert client.call("oom_snapshot", on=True) == {
            "v": 1,
            "type": "ok",
            "cmd": "oom_snapshot",
            "armed": True,
        }
        assert wait_until(lambda: target.read_status()["observers"] == 1, timeout=10)
        os.kill(target.pid, signal.SIGUSR1)  # as the allocator calls it before raising
        msg = client.wait_for("memory_snapshot", timeout=30)
        assert msg["trigger"] == "oom" and msg["device"] == 0
        data = snapshot.collect(res.socket_path, msg["path"], str(tmp_path / "oom.pickle"))
        assert snapshot.read_summary(data).segments == 2
        os.kill(target.pid, signal.SIGUSR1)  # a second OOM before re-arming: no second file
        assert wait_until(lambda: target.read_status()["ooms"] == 2, timeout=10)
        assert client.call("detach")["cmd"] == "detach"
        assert [m for m in client.pushed if m.get("type") == "memory_snapshot"] == []
    finally:
        client.close()
    assert wait_until(lambda: not os.path.exists(res.socket_path), timeout=30)
    assert target.read_status()["history"] == []  # no history recorded for OOMs


def test_a_target_that_exits_while_it_records_is_exit_3(targets, tmp_path):
    import threading

    from infertop.collect.agent import snapshot
    from infertop.errors import TargetNotFound

    target = _stand_in(targets)
    res = inject(target.pid, timeout=30, require_torch=False)
    assert res.ok, res.reason
    raised: list[BaseException] = []

    def take() -> None:
        try:
            snapshot.take(res.socket_path, target.pid, 60.0, str(tmp_path / "s.pickle"))
        except BaseException as exc:  # noqa: BLE001 - checked below
            raised.append(exc)

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    assert wait_until(lambda: target.read_status()["history"] == [["all", 100000]], timeout=30)
    target.proc.kill()
    target.proc.wait(30)
    thread.join(30)
    (exc,) = raised
    assert isinstance(exc, TargetNotFound) and exc.exit_code == 3
    assert f"pid {target.pid} exited before its snapshot was written" in exc.message
    assert not (tmp_path / "s.pickle").exists()
