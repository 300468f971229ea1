"""The client against the real in-process agent, armed in a small torch (CPU) process."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infertop.collect.agent.client import AgentCollector, AgentConfig
from infertop.model.events import CollectorStatus, OpWindow, StageSpan, TargetInfo

agent = pytest.importorskip("infertop.agent")
pytestmark = [
    pytest.mark.slow,
    # torch is the target's (a process of its own): not imported here at collection (seconds)
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.skipif(not hasattr(agent, "arm"), reason="the agent cannot be armed yet"),
]

TARGET = """
import sys, time
import torch
from torch import nn
import infertop
import infertop.agent

model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 64))
print(infertop.agent.arm(), flush=True)
x = torch.randn(8, 128)
deadline = time.time() + float(sys.argv[1])
try:
    with torch.no_grad():
        while time.time() < deadline:
            with infertop.stage("forward"):
                y = model(x)
            y.sum().item()
            time.sleep(0.003)
except KeyboardInterrupt:
    pass
"""


def run_client(path: str, pid: int, windows: int) -> list[object]:
    target = TargetInfo(pid, "python target.py", "3.11", None, time.time())
    c = AgentCollector(path, AgentConfig(window_s=0.2, period_s=0.5), target=target)
    c.start()
    events: list[object] = []
    deadline = time.monotonic() + 30
    while sum(isinstance(e, OpWindow) for e in events) < windows and time.monotonic() < deadline:
        events += c.poll()
        time.sleep(0.05)
    c.stop()
    return events + c.poll()


def test_windows_from_the_real_agent_and_a_clean_detach(tmp_path: Path) -> None:
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, str(script), "40"], stdout=subprocess.PIPE, text=True, cwd=root,
        env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    try:
        path = proc.stdout.readline().strip() if proc.stdout else ""
        assert path.endswith(f"agent-{proc.pid}.sock"), path
        events = run_client(path, proc.pid, windows=2)
        windows = [e for e in events if isinstance(e, OpWindow)]
        assert len(windows) >= 2, [e for e in events if isinstance(e, CollectorStatus)]
        names = {n for w in windows for p in w.paths for n in p.names}
        assert {"aten::linear", "aten::addmm", "aten::gelu"} <= names
        assert all(w.source == "agent" and w.t_end > w.t_start for w in windows)
        infos = [e for e in events if isinstance(e, TargetInfo)]
        assert infos and infos[0].pid == proc.pid and infos[0].torch
        statuses = [e for e in events if isinstance(e, CollectorStatus)]
        assert statuses[-1].state == "stopped" and statuses[-1].message == "detached"
        spans = [e for e in events if isinstance(e, StageSpan)]
        assert all(s.stage == "forward" and s.t_end >= s.t_start for s in spans)
        # detached cleanly: the armed agent takes the next client
        again = run_client(path, proc.pid, windows=1)
        assert any(isinstance(e, OpWindow) for e in again)
        assert proc.poll() is None  # the target never noticed
    finally:
        proc.send_signal(signal.SIGINT)  # a normal exit: the agent removes its socket
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)



def test_profile_now_starts_a_window_out_of_the_cycle(tmp_path: Path) -> None:
    """With one window a minute, ``profile_now`` gets the next one now, or as soon as the
    last window's cost allows, and the cycle goes on from there."""
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, str(script), "40"], stdout=subprocess.PIPE, text=True, cwd=root,
        env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    try:
        path = proc.stdout.readline().strip() if proc.stdout else ""
        target = TargetInfo(proc.pid, "python target.py", "3.11", None, time.time())
        c = AgentCollector(path, AgentConfig(window_s=0.2, period_s=60.0), target=target)
        c.start()
        events: list[object] = []
        deadline = time.monotonic() + 30
        while not any(isinstance(e, OpWindow) for e in events) and time.monotonic() < deadline:
            events += c.poll()  # the first window (a probe) starts with the session
            time.sleep(0.05)
        assert any(isinstance(e, OpWindow) for e in events), events
        asked = time.monotonic()
        c.profile_now()  # asked once
        while sum(isinstance(e, OpWindow) for e in events) < 2 and time.monotonic() < asked + 15:
            events += c.poll()
            time.sleep(0.05)
        c.stop()
        windows = [e for e in events if isinstance(e, OpWindow)]
        answer = c.profile_now_answer
        assert len(windows) == 2, (answer, [e for e in events if isinstance(e, CollectorStatus)])
        assert windows[1].t_start - windows[0].t_start < 15  # not the period's 60 s
        assert {"aten::linear"} <= {n for p in windows[1].paths for n in p.names}
        assert answer is not None
        assert answer["started"] or answer["reason"].startswith("the last window's cost: the next")
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
