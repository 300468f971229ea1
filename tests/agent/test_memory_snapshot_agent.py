"""CUDA memory snapshots through the real agent injected into a real CPU-only torch target:
no CUDA here, so the agent must say so plainly, start nothing, and leave (docs/memory-snapshot.md).
The CUDA path itself is checked on a GPU run (the same document says what it must check)."""

from __future__ import annotations

import os

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
