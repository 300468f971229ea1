"""Latency by default on a one-process FastAPI app: ``infertop record PID`` with no flag gives
the requests' p50 within 20 % of what the clients measured, and the real Hugging Face
tokenizer's calls (preprocess) and FastAPI's JSON encoding (serialize) timed per call, on
Python 3.12 (the agent's sys.monitoring timings of known entry points)."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

import pytest

from .helpers import ROOT, VENV312, infertop, report_json, status_of, stop_target, until
from .http_clients import JsonClients

pytestmark = pytest.mark.slow
APP = ROOT / "tests" / "integration" / "targets" / "fastapi_app.py"



@pytest.mark.skipif(
    not VENV312.exists(),
    reason=f"needs {VENV312} (make .venv312/.installed: Python 3.12 with fastapi, uvicorn, transformers)",
)
def test_a_fastapi_app_has_request_and_tokenizer_latency_with_no_flags(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    proc = subprocess.Popen(
        [str(VENV312), str(APP), "--status", str(status)],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    clients = None
    try:
        port = until(lambda: status_of(status).get("port"), 60, "the app's port")
        clients = JsonClients(port, "/embed")
        until(lambda: status_of(status).get("served", 0) > 30, 60, "the first requests")
        before = status_of(status)
        out = tmp_path / "fastapi.infertop"
        p = infertop("record", str(proc.pid), "-o", str(out), "--duration", "10", timeout=150)
        assert p.returncode == 0, p.stderr
        after = status_of(status)
    finally:
        if clients is not None:
            clients.close()
        _, err = stop_target(proc)
    assert "Traceback" not in err, err
    assert not clients.errors, clients.errors
    rep = report_json(str(out))
    stages = {s["name"]: s for s in rep["stages"]}
    # transformers is loaded (its tokenizer) but nothing generates: no generation section
    assert rep["generation"] is None and "prefill" not in stages and "decode" not in stages

    # the requests, in the app, against the clients' own round trips over the same seconds
    req = rep["requests"]
    assert req is not None and req["count"] >= 100, req
    t0 = rep["source"]["start_time"]
    theirs = [ms for start, ms in clients.seen if t0 <= start <= t0 + rep["duration_s"]]
    their_p50 = statistics.median(theirs)
    ours = req["latency_ms"]["p50"]
    print(f"request p50 {ours:.2f} ms in the app, {their_p50:.2f} ms at the clients")
    # inside the round trip, and most of it (the app's work is most of a loopback request):
    # a margin that a busy machine, slowing the clients more than the app, cannot cross
    assert 0.1 * their_p50 <= ours <= 1.1 * their_p50, (req["latency_ms"], their_p50)
    assert [r["route"] for r in req["by_route"]] == ["POST /embed"], req["by_route"]

    # the tokenizer's calls: one preprocess call per request (its __call__ is the outermost
    # of its stage: the encode inside it is the same call), as long as the app's own clock says
    pre = stages["preprocess"]
    served = after["served"] - before["served"]
    assert 0.8 * req["count"] <= pre["calls"] <= served + 5, (pre["calls"], req["count"], served)
    truth = statistics.median(after["tokenize_ms"][before["served"]:])
    print(f"tokenizer p50 {pre['latency_ms']['p50']:.3f} ms timed, {truth:.3f} ms in the app")
    assert pre["latency_ms"]["p50"] == pytest.approx(truth, rel=0.25, abs=0.05), (pre, truth)
    # FastAPI's response (the endpoint declares its type: pydantic's core writes the JSON),
    # once a request; the agent's own messages, json.dumps on its thread in the same process,
    # are not counted
    ser = stages["serialize"]
    assert 0.8 * req["count"] <= ser["calls"] <= served + 5, (ser["calls"], req["count"], served)
    assert ser["latency_ms"]["p50"] < pre["latency_ms"]["p50"], (ser, pre)
