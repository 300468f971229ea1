"""profile_memory on a real target: a model call profiled on its own thread (``_MemoryCall``)
names the bytes its forward allocates and its peak."""

from __future__ import annotations

import pytest
from agenthelpers import Client

from infertop.agent.inject import inject
from infertop.model.fields import decode_op_window

pytestmark = pytest.mark.slow

MIB = 1 << 20


def _forward_memory(msg: dict) -> bool:
    m = msg.get("memory")
    return m is not None and any(r[0] == "forward" and r[1] == "cpu" for r in m["stages"])


def test_a_forward_calls_allocation_shows_in_its_memory_window(targets):
    target = targets("module_loop.py", args=("--mib", "8"))
    result = inject(target.pid, timeout=10)
    assert result.ok, result.reason
    client = Client(result.socket_path)
    try:
        assert client.call("hello", client="test")["type"] == "hello"
        ok = client.call("configure", window_s=0.2, period_s=0.5, profile_memory=True)
        assert ok["type"] == "ok" and ok["config"]["profile_memory"] is True
        assert client.call("start")["type"] == "ok"
        # the windows alternate: one over all threads (no memory field), then one model call
        plain = client.wait_for("window", timeout=60, predicate=lambda m: "memory" not in m)
        msg = client.wait_for("window", timeout=60, predicate=_forward_memory)
        client.call("detach")
    finally:
        client.close()
    assert plain["events"] > 0
    row = next(r for r in msg["memory"]["stages"] if r[0] == "forward" and r[1] == "cpu")
    _stage, _device, calls, allocs, alloc_bytes, _freed, peak_max, peak_sum = row
    # one call of Model.forward: its 8 MiB buffer, a few small tensors; freed by its end
    assert calls >= 1 and allocs >= 1
    assert 8 * MIB <= alloc_bytes <= calls * 9 * MIB
    assert 8 * MIB <= peak_max <= 9 * MIB and peak_sum >= peak_max
    ops = {tuple(o[0]): o for o in msg["memory"]["ops"]}
    assert any(names[-1] in ("aten::ones", "aten::empty", "aten::fill_") and o[4] >= 8 * MIB
               for names, o in ops.items()), ops  # fmt: skip
    assert msg["memory"]["rows"] == 4  # the call's batch: x of 4 rows
    # the window is one call, and reads as an op window with its memory
    assert msg["t_end"] - msg["t_start"] < 5.0
    w = decode_op_window(dict(msg, source="agent"))
    assert w.memory is not None and w.memory.stages[0].peak_max == peak_max
