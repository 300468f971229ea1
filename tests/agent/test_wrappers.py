"""Python 3.10 and 3.11 (no ``sys.monitoring``): the agent times the same calls it times on
3.12 by wrapping them in place (``payload/wrappers.py``), and detach gives the target back
every object it replaced. A real target on the dev venv's Python (``targets/wrapped_target.py``,
torch), attached with the defaults and one ``--stage`` rule; and pyenv's 3.10 where it has it."""

from __future__ import annotations

import os
import sys
import time

import pytest
from agenthelpers import ROOT, Client, clean_env, pyenv_python, settled, threads, wait_until

from infertop.agent.inject import inject

pytestmark = pytest.mark.slow
#: the tests' rule: ``preprocess`` calls ``tokenize`` twice; both are the stage, one call counts
RULES = [["preprocess", "*wrapped_target.py:preprocess"], ["preprocess", "*wrapped_target.py:tokenize"]]
#: what the agent wraps in the target with those rules and its defaults
WRAPPED = {"tokenize", "preprocess", "Net.forward", "json.dumps", "dumps"}
CYCLES = int(os.environ.get("INFERTOP_WRAP_CYCLES", "50"))


def _needs_wrappers() -> None:
    if sys.version_info[:2] >= (3, 12):
        pytest.skip("the dev venv is Python 3.12+: the agent uses sys.monitoring there")


def attached(pid: int, want: int = 20, timeout: float = 30.0, during=None) -> tuple[dict, list]:
    """One session with the defaults and ``RULES``: the hello and the spans, at least ``want``
    forward spans (or what came within ``timeout``); ``during()`` is called while attached."""
    result = inject(pid, require_torch=False)
    assert result.ok, result.reason
    client = Client(result.socket_path)
    spans: list = []
    try:
        hello = client.call("hello", client="wrappers")
        assert client.call("configure", stage_functions=RULES)["type"] == "ok"
        client.call("start")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and sum(s[1] == "forward" for s in spans) < want:
            spans += client.wait_for("spans", timeout=10)["spans"]
        if during is not None:
            during()
        client.call("detach")
    finally:
        client.close()
    assert wait_until(lambda: not os.path.exists(result.socket_path), 10)
    return hello, spans


def test_a_311_target_gets_per_call_latency_with_the_defaults(targets) -> None:
    _needs_wrappers()
    target = targets("wrapped_target.py", env=clean_env(), ready_key="modules_same")
    assert wait_until(lambda: target.read_status()["modules_same"], 30)
    before = target.read_status()
    seen: dict = {}
    hello, spans = attached(target.pid, during=lambda: seen.update(target.read_status()))
    assert hello["monitoring"] is False and hello["timer"] == "wrappers"
    assert set(seen["changed"]) == WRAPPED, seen  # wrapped where the target looks them up
    by = {stage: [s for s in spans if s[1] == stage] for stage in ("preprocess", "forward", "serialize")}
    assert all(len(v) >= 10 for v in by.values()), {k: len(v) for k, v in by.items()}
    assert {s[1] for s in spans} == set(by), spans[:5]
    for tid, _stage, t0, t1, *_ in spans:
        assert tid == target.pid and t0 <= t1  # the main thread's OS id
    # preprocess runs two tokenize calls of >= 2 ms each: one call of its stage, not three
    assert min(s[3] - s[2] for s in by["preprocess"]) >= 0.004, by["preprocess"][:5]
    assert abs(len(by["preprocess"]) - len(by["forward"])) <= 2
    # the root model's forward alone (not its blocks'), with its batch
    assert {s[5] for s in by["forward"]} == {3}, by["forward"][:5]
    # detach gave every object back: the same functions, classes' methods, modules, threads
    assert wait_until(lambda: target.read_status()["changed"] == [], 10), target.read_status()
    after = target.read_status()
    assert after["modules_same"], after["extra_modules"]
    assert after["threads"] == before["threads"]
    assert target.read_status()["n"] > after["n"] - 1  # still running
    _out, err = target.stop()
    assert err == ""


@pytest.mark.long
def test_attach_detach_cycles_leave_the_targets_objects_as_they_were(targets) -> None:
    _needs_wrappers()
    target = targets("wrapped_target.py", env=clean_env(), ready_key="modules_same")
    assert wait_until(lambda: target.read_status()["modules_same"], 30)
    py_threads = target.read_status()["threads"]
    base_threads = None  # the OS threads after the first cycle: libkineto keeps one of its own
    for cycle in range(CYCLES):
        seen: dict = {}
        _, spans = attached(target.pid, want=1, during=lambda s=seen: s.update(target.read_status()))
        assert set(seen["changed"]) == WRAPPED, (cycle, seen)
        assert any(s[1] == "forward" for s in spans), cycle
        assert wait_until(lambda: target.read_status()["changed"] == [], 10), (cycle, target.read_status())
        # the agent's module goes as its thread ends, a moment after the wrappers are back
        assert wait_until(lambda: target.read_status()["modules_same"], 10), (
            cycle, target.read_status()["extra_modules"])  # fmt: skip
        assert wait_until(lambda: target.read_status()["threads"] == py_threads, 10), cycle
        if base_threads is None:
            base_threads = settled(lambda: threads(target.pid))
        assert wait_until(lambda b=base_threads: threads(target.pid) == b, 10), cycle
    _out, err = target.stop()
    assert target.proc.returncode == 0 and err == ""


@pytest.mark.parametrize("version", ["3.8", "3.9", "3.10"])
def test_an_older_python_target_is_timed_too(targets, version: str) -> None:
    """pyenv's 3.10, 3.9 and 3.8 (no torch there): a plain function named by a rule, the
    agent's span sink beside it (``infertop.stage`` imported from the repository on 3.9 and
    3.10; the package itself needs 3.10), and nothing left after detach."""
    exe = pyenv_python(version)
    if exe is None:
        pytest.skip(f"no Python {version} here (pyenv)")
    env = clean_env(PYTHONPATH=str(ROOT)) if version != "3.8" else clean_env()
    target = targets("spans_target.py", python=exe, env=env)
    result = inject(target.pid, require_torch=False)
    assert result.ok, result.reason
    client = Client(result.socket_path)
    spans: list = []
    try:
        assert client.call("hello", client="wrappers")["timer"] == "wrappers"
        client.call("configure", stage_functions=[["preprocess", "*spans_target.py:Server.handle"]])
        client.call("start")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sum(s[1] == "preprocess" for s in spans) < 10:
            spans += client.wait_for("spans", timeout=10)["spans"]
        assert target.read_status()["handle_wrapped"] is True
        client.call("detach")
    finally:
        client.close()
    assert wait_until(lambda: not os.path.exists(result.socket_path), 10)
    pre = [s for s in spans if s[1] == "preprocess"]
    assert len(pre) >= 10 and all(s[3] - s[2] >= 0.005 for s in pre)  # encode_batch sleeps 5 ms
    assert wait_until(lambda: target.read_status()["handle_wrapped"] is False, 10)
    out, err = target.stop()
    assert out == "" and err == ""


COMPILED = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from infertop.agent.payload.wrappers import _Wrappers

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))

model = Net()
fast = torch.compile(model, backend="eager")
x = torch.randn(2, 4)
fast(x)
timer = _Wrappers({Net.forward.__code__: "forward"}, lambda *a: None)
timer.install()
fast(x)
print(len(timer.slots), timer.failed)
timer.uninstall()
"""


def test_a_model_under_torch_compile_is_left_alone() -> None:
    """Dynamo guards on the forward a compiled model calls: a wrapper there would make it
    compile again, with warnings on the target's stderr. The wrappers leave it alone, and say
    so."""
    _needs_wrappers()
    import subprocess

    p = subprocess.run([sys.executable, "-c", COMPILED, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "0 [('Net.forward', 'compiled with torch.compile')]", p.stdout
    assert p.stderr == "", p.stderr[-2000:]


def wsgi_app(environ, start_response):
    """A WSGI app whose body is written after it returns (streamed): 3 chunks."""
    start_response("200 OK", [("Content-Type", "text/plain")])

    def chunks():
        for i in range(3):
            time.sleep(0.002)
            yield b"%d" % i

    return chunks()


def test_a_wsgi_request_lasts_until_its_server_closes_the_body() -> None:
    """A WSGI request is timed from the app's call to the server's ``close()`` of its response
    iterable (the body written), named by method and path; one whose body its server never
    closed is not sent. On every Python: by a wrapper."""
    from infertop.agent.payload.stages import _wsgi_http
    from infertop.agent.payload.wrappers import _Wrappers

    spans: list = []
    code = wsgi_app.__code__
    timer = _Wrappers({code: "request"}, lambda *a: spans.append(a), filters={code: _wsgi_http}, bodies={code})
    timer.install()
    try:
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/predict", "SCRIPT_NAME": ""}
        t0 = time.perf_counter_ns()
        body = globals()["wsgi_app"](environ, lambda *a: None)
        returned = time.perf_counter_ns()
        assert not spans  # still writing its body
        assert b"".join(body) == b"012"
        body.close()
        t1 = time.perf_counter_ns()

        globals()["wsgi_app"](dict(environ, PATH_INFO="/dropped"), lambda *a: None)
        sent_at_once = len(spans)
        wrapped = timer.slots[0].wrapper
    finally:
        timer.uninstall()
    assert globals()["wsgi_app"] is not wrapped and globals()["wsgi_app"].__code__ is code
    _tid, stage, start, end, request, _batch = spans[0]
    assert stage == "request" and request == "GET /predict #1"
    assert t0 <= start <= returned < end <= t1 and end - returned >= 6_000_000  # 3 chunks of 2 ms
    assert sent_at_once == 1  # the second request's body was never closed: not sent


HOOKED = """
import functools, sys, types, torch
sys.path.insert(0, sys.argv[1])
sys.modules.setdefault("accelerate", types.ModuleType("accelerate"))  # as if it had hooked it
from infertop.agent.payload.wrappers import _Wrappers

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))

def add_hook(module):  # accelerate's add_hook_to_module, in short
    module._old_forward = old = module.forward
    def new_forward(module, *args, **kwargs):
        return module._old_forward(*args, **kwargs)
    module.forward = functools.update_wrapper(functools.partial(new_forward, module), old)

model = Net()
add_hook(model)
hook = model.__dict__["forward"]
spans = []
timer = _Wrappers({Net.forward.__code__: "forward"}, lambda *a: spans.append(a))
timer.install()
model(torch.randn(5, 4))
model(torch.randn(2, 4))
timer.uninstall()
print([s[5] for s in spans], model.__dict__["forward"] is hook, Net.__dict__["forward"].__code__ is Net.forward.__code__)
"""


def test_a_model_hooked_on_its_instance_is_timed_there() -> None:
    """A model loaded with accelerate's hooks (``device_map="auto"``) holds its own ``forward``,
    a partial of the hook around the bound original taken at load: its class's entry is never
    called. The instance's entry is wrapped (one call each, its batch read), and put back."""
    _needs_wrappers()
    import subprocess

    p = subprocess.run([sys.executable, "-c", HOOKED, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[5, 2] True True", p.stdout
    assert p.stderr == "", p.stderr[-2000:]
