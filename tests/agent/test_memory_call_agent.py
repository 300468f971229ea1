"""profile_memory on a real target: a model call profiled on its own thread (``_MemoryCall``)
names the bytes its forward allocates and its peak."""

from __future__ import annotations

import os

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


def _memory_call():
    import torch

    from infertop.agent.payload.constants import DEFAULT_CONFIG
    from infertop.agent.payload.kineto import _KinetoLog
    from infertop.agent.payload.window import _MemoryCall

    return torch, _MemoryCall(torch, dict(DEFAULT_CONFIG, profile_memory=True), _KinetoLog())


def _hooks(torch) -> int:
    m = torch.nn.modules.module
    return len(m._global_forward_pre_hooks) + len(m._global_forward_hooks)




def test_a_memory_call_claims_the_outermost_call_and_survives_one_that_raises():
    torch, call = _memory_call()

    class Boom(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = torch.nn.Linear(8, 8)

        def forward(self, x):
            self.inner(x)
            raise RuntimeError("boom")

    model = Boom()
    call.start()
    assert _hooks(torch) == 2
    with pytest.raises(RuntimeError):
        model(torch.ones(3, 8))
    assert call.state == "done" and call.module is model and call.rows == 3
    assert _hooks(torch) == 0 and not torch.autograd.profiler._is_profiler_enabled
    assert not torch._C._autograd._profiler_enabled()
    assert any(e.name() == "aten::linear" for e in call.stop())


def test_giving_up_on_a_running_call_leaves_its_end_to_stop_the_profiler():
    torch, call = _memory_call()
    box: dict = {}

    class Slow(torch.nn.Module):
        def forward(self, x):
            box["inside"] = True
            call.close()  # the agent gives up while the call runs
            box["hooks_inside"] = _hooks(torch)
            return x * 2

    call.start()
    Slow()(torch.ones(2))
    assert box == {"inside": True, "hooks_inside": 1}  # the one that stops its profiler stays
    assert _hooks(torch) == 0 and not torch.autograd.profiler._is_profiler_enabled
    assert not torch._C._autograd._profiler_enabled()
    assert call.state == "closed" and call.stop() == []


def test_with_the_models_known_it_waits_for_a_call_of_one_even_inside_another_module():
    import torch

    from infertop.agent.payload.constants import DEFAULT_CONFIG
    from infertop.agent.payload.kineto import _KinetoLog
    from infertop.agent.payload.stages import _unwrapped_code
    from infertop.agent.payload.window import _MemoryCall

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x)

    class Wrapper(torch.nn.Module):  # a pipeline module around the model
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)

    model = Model()
    tokenizer_like = torch.nn.Embedding(10, 4)
    call = _MemoryCall(torch, dict(DEFAULT_CONFIG, profile_memory=True), _KinetoLog(),
                       [Model.forward.__code__], _unwrapped_code)  # fmt: skip
    call.start()
    tokenizer_like(torch.tensor([1, 2]))  # not a model the agent times: not claimed
    assert call.state == "armed"
    Wrapper(model)(torch.ones(5, 4))
    assert call.state == "done" and call.module is model and call.rows == 5 and call.depth == 2
    assert _hooks(torch) == 0 and not torch._C._autograd._profiler_enabled()
    names = {e.name() for e in call.stop()}
    assert "aten::linear" in names and "aten::embedding" not in names


COMPILED = r'''
import sys, warnings
import torch
from infertop.agent.payload.constants import DEFAULT_CONFIG
from infertop.agent.payload.kineto import _KinetoLog
from infertop.agent.payload.window import _MemoryCall, _dynamo_compiled

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x))

assert not _dynamo_compiled()
cm = torch.compile(M(), backend="eager")
x = torch.ones(4, 8)
cm(x)
assert _dynamo_compiled()  # the agent arms no memory call in this process
# armed anyway (a model compiled while a call is armed): its hooks stay out of the graph
call = _MemoryCall(torch, dict(DEFAULT_CONFIG, profile_memory=True), _KinetoLog())
call.start()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.compile(M(), backend="eager")(x)
call.stop()
print("ok")
'''


def test_torch_compile_and_the_memory_call(tmp_path):
    """In a process of its own: torch._dynamo, once imported, stays."""
    import subprocess
    import sys

    from agenthelpers import ROOT

    script = tmp_path / "compiled.py"
    script.write_text(COMPILED)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                       cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-3000:]
