"""Stage spans: ``infertop.stage`` sinks and sys.monitoring timings of ``stage_functions``."""

from __future__ import annotations

import sys
import time

import pytest
from agenthelpers import ROOT, VENV_PY, Client, clean_env, pyenv_python, wait_until

from infertop.agent import payload as PL
from infertop.agent.inject import inject

pytestmark = pytest.mark.slow


def collect_spans(client: Client, seconds: float) -> list:
    spans = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = client.wait_for("spans", timeout=10)
        spans += msg["spans"]
    return spans


def session(pid: int, stage_functions: list) -> tuple[dict, list, list]:
    result = inject(pid, require_torch=False)
    assert result.ok, result.reason
    client = Client(result.socket_path)
    try:
        hello = client.call("hello", client="spans")
        ok = client.call("configure", stage_functions=stage_functions)
        assert ok["type"] == "ok" and ok["config"]["stage_functions"] == stage_functions
        client.call("start")
        spans = collect_spans(client, 1.5)
        statuses = [m for m in client.pushed if m.get("type") == "status"]
        client.call("detach")
    finally:
        client.close()
    assert wait_until(lambda: not __import__("os").path.exists(result.socket_path), 5)
    return hello, spans, statuses


def test_monitoring_spans_on_312_and_cleanup(targets):
    exe = pyenv_python("3.12")
    if exe is None:
        pytest.skip("no Python 3.12 here")
    target = targets("spans_target.py", python=exe, env=clean_env(PYTHONPATH=str(ROOT)))
    hello, spans, _ = session(target.pid, [["preprocess", "encode_batch"]])
    assert hello["monitoring"] is True and hello["torch"] is None
    pre = [s for s in spans if s[1] == "preprocess"]
    ser = [s for s in spans if s[1] == "serialize"]  # from `with infertop.stage("serialize")`
    assert len(pre) >= 40 and len(ser) >= 40  # ~55 calls a second for 1.5 s
    now = time.time()
    for tid, stage, t0, t1 in pre:  # timed functions: no request id
        assert tid == target.pid  # the main thread's OS id
        assert 0.004 < t1 - t0 < 0.2, (t0, t1)  # encode_batch sleeps 5 ms
        assert now - 30 < t0 < t1 <= now + 1
    # every serialize span is the target's `with infertop.stage(...)` block, with the request id
    # it gave: the json.dumps timed by default inside it is part of it, and the agent's own
    # json.dumps (its messages, on its thread) is never timed
    for tid, stage, t0, t1, request in ser:
        assert 0 <= t1 - t0 < 0.05 and request.isdigit()
    assert len({s[4] for s in ser}) == len(ser)  # one request each
    # detach left nothing: tool id free, sink removed (the target reports both)
    assert wait_until(lambda: target.read_status()["tool"] is None, 3)
    status = target.read_status()
    assert status["tools"] == [None] * 6 and status["sink"] is False
    # and a second session can take the same tool id again
    hello, spans, _ = session(target.pid, [["preprocess", "*spans_target.py:Server.handle"]])
    assert {s[1] for s in spans} == {"preprocess", "serialize"}
    assert wait_until(lambda: target.read_status()["tool"] is None, 3)
    # a rule that matches everything ("*", a typo) would time every call: refused, said why
    _, spans, statuses = session(target.pid, [["preprocess", "*"]])
    assert {s[1] for s in spans} == {"serialize"}
    assert any("make the patterns narrower" in s["message"] for s in statuses), statuses
    out, err = target.stop()
    assert out == "" and err == ""


def test_before_312_rules_are_timed_by_wrappers_and_stage_spans_flow(targets):
    if sys.version_info[:2] >= (3, 12):
        pytest.skip("the dev venv is Python 3.12+: no wrappers there")
    target = targets("spans_target.py", python=VENV_PY, env=clean_env(PYTHONPATH=str(ROOT)))
    hello, spans, statuses = session(target.pid, [["preprocess", "encode_batch"]])
    assert hello["monitoring"] is False and hello["timer"] == "wrappers"
    assert {s[1] for s in spans} == {"preprocess", "serialize"}
    pre = [s for s in spans if s[1] == "preprocess"]
    assert len(pre) >= 10 and all(s[3] - s[2] >= 0.005 for s in pre)  # encode_batch sleeps 5 ms
    # the json.dumps inside each `with infertop.stage("serialize")` block is part of it
    assert all(len(s) == 5 and s[4].isdigit() for s in spans if s[1] == "serialize")
    assert not any("3.12" in s["message"] for s in statuses), statuses
    assert wait_until(lambda: target.read_status()["sink"] is False, 3)
    assert target.read_status()["handle_wrapped"] is False
    out, err = target.stop()
    assert out == "" and err == ""


def test_pattern_matching_rules():
    pats = PL.parse_stage_patterns([["pre", "encode_*"], ["srv", "*/server.py:Server.handle"], ["x", "a:b:c"]])
    assert [(p.stage, p.pattern) for p in pats] == [
        ("pre", "encode_*"), ("srv", "*/server.py:Server.handle"), ("x", "a:b:c")
    ]  # fmt: skip
    assert PL.match_stage(pats, "/app/x.py", "Codec.encode_batch") == "pre"  # last part
    assert PL.match_stage(pats, "/app/server.py", "Server.handle") == "srv"
    assert PL.match_stage(pats, "/app/other.py", "Server.handle") is None  # file glob
    assert PL.match_stage(pats, "a:b", "c") == "x"  # the last ':' splits
    # an empty function part is any function of the file, as in infertop's own stage rules
    assert PL.match_stage(PL.parse_stage_patterns([["f", "*/app.py:"]]), "/x/app.py", "run") == "f"
    for bad in ("x", [["a"]], [["a", ""]], [["a", 3]], [["", "f"]]):
        with pytest.raises(ValueError):
            PL.parse_stage_patterns(bad)
