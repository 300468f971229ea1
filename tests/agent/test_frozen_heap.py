"""A model in a frozen heap (vLLM's processes, a Ray Serve replica: ``gc.freeze()``) is timed
as ``forward`` once its forward runs, with no walk of the heap: found on its thread's stack."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from agenthelpers import Client, clean_env, wait_until

from infertop.agent.inject import inject

ROOT = Path(__file__).resolve().parents[2]
VENV312 = ROOT / ".venv312" / "bin" / "python"
pytestmark = pytest.mark.slow


def test_a_frozen_models_forward_is_timed_from_its_stack(targets) -> None:
    if not VENV312.exists():
        pytest.skip(f"needs {VENV312} (make .venv312/.installed: Python 3.12 with torch)")
    target = targets("frozen_model.py", python=str(VENV312), env=clean_env(),
                     ready_key="forwards")  # fmt: skip
    assert target.read_status()["frozen"] >= 10_000  # frozen as the agent counts a freeze
    result = inject(target.pid, require_torch=False)
    assert result.ok, result.reason
    client = Client(result.socket_path)
    spans: list = []
    try:
        client.call("hello", client="frozen")
        assert client.call("configure", stage_functions=[])["type"] == "ok"
        client.call("start")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(spans) < 20:
            spans += client.wait_for("spans", timeout=10)["spans"]
        client.call("detach")
    finally:
        client.close()
    assert wait_until(lambda: not Path(result.socket_path).exists(), 5)
    forwards = [s for s in spans if s[1] == "forward"]
    assert len(forwards) >= 20, spans[:5]
    for tid, _stage, t0, t1, *_ in forwards:  # one call a forward, on the main thread
        assert tid == target.pid and 0 < t1 - t0 < 1.0
    out, err = target.stop()
    assert err == ""
