"""``ChildAgents``: the agent in the session's other processes, against real targets. A target
whose main thread sits in a long C call is tried again after its injection timed out; one
without torch is not injected at all (and is looked at again later)."""

from __future__ import annotations

import time

import pytest
from agenthelpers import wait_until

from infertop.collect.agent.children import ChildAgents
from infertop.collect.agent.client import AgentConfig
from infertop.model.events import CollectorStatus, OpWindow

pytestmark = pytest.mark.slow


def _collect(agents: ChildAgents, until, timeout: float) -> list:  # noqa: ANN001
    seen: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(seen):
        seen += agents.poll()
        time.sleep(0.1)
    return seen


def test_a_blocked_target_is_injected_once_it_can_be(targets) -> None:
    blocked = targets(args=("--workers", "0", "--block-main", "6"))
    no_torch = targets(args=("--workers", "0", "--no-torch"))
    agents = ChildAgents(
        [], AgentConfig(window_s=0.2, period_s=1.0), extra_targets=[blocked.pid, no_torch.pid],
        children=False, inject_timeout=2.0,
    )  # fmt: skip
    agents.start()
    try:
        seen = _collect(
            agents, lambda evs: any(isinstance(e, OpWindow) for e in evs), timeout=40
        )
    finally:
        agents.stop()
    windows = [e for e in seen if isinstance(e, OpWindow)]
    assert windows and all(w.pid == blocked.pid for w in windows)
    said = [e.message for e in seen if isinstance(e, CollectorStatus)]
    assert any("timed out" in m or "safe point" in m for m in said), said  # the first try
    assert any(m.startswith("1 of 1 processes") for m in said), said  # the second
    assert wait_until(lambda: blocked.proc.poll() is None, 1)
    assert no_torch.proc.poll() is None
