"""Latency by default in a Ray Serve replica (Python 3.12, ray[serve] 2.60): a deployment that
tokenizes with a real Hugging Face fast tokenizer and runs a small torch model, behind Serve's
HTTP proxy, loaded by three clients; ``infertop record REPLICA_PID`` with no flag gives the
replica's requests by route, the tokenizer's and the model's calls timed, each beside the
replica's own clock. Ray's workers run no Python on their main thread after they start, so
the agent is armed in them as docs/processes.md tells a user (``INFERTOP_AGENT=1`` and Ray's
``worker_process_setup_hook``); Serve freezes the replica's heap after ``__init__``
(``gc.freeze()``), which hides the model from the collector's list: the agent finds it anyway."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import pytest

from infertop.agent.protocol import socket_dir, sweep_stale_sockets

from .helpers import ROOT, VENV312, infertop, pid_gone, report_json, status_of, stop_target, until
from .http_clients import JsonClients, free_port

pytestmark = [pytest.mark.slow, pytest.mark.long]  # a Ray cluster: ~45 s
APP = ROOT / "tests" / "integration" / "targets" / "rayserve_app.py"


def _has_ray_serve() -> bool:
    """ray[serve] in the 3.12 venv, looked for on disk (no interpreter started at collection)."""
    if not VENV312.exists():
        return False
    return any(VENV312.parents[1].glob("lib/python3*/site-packages/ray/serve/__init__.py"))


@pytest.mark.skipif(
    not _has_ray_serve(),
    reason=f"needs ray[serve] in {VENV312} (make .venv312/.installed: requirements-py312.txt)",
)
def test_a_ray_serve_replica_has_request_tokenizer_and_model_latency_with_no_flags(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    ray_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    port = free_port()
    proc = subprocess.Popen(
        [str(VENV312), str(APP), "--port", str(port), "--status", str(status), "--arm", str(ROOT),
         "--ray-dir", ray_dir],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )  # fmt: skip
    clients = replica = None
    try:
        replica = until(lambda: status_of(status).get("pid"), 240, "the replica's status (Ray and Serve up)")
        clients = JsonClients(port, "/embed", timeout=60)
        until(lambda: status_of(status).get("served", 0) > 30, 120, "the first requests")
        before = status_of(status)
        out = tmp_path / "replica.infertop"
        p = infertop("record", str(replica), "-o", str(out), "--duration", "12", timeout=180)
        assert p.returncode == 0, p.stderr
        after = status_of(status)
    finally:
        if clients is not None:
            clients.close()
        _, err = stop_target(proc)
        if replica:  # serve.shutdown and ray.shutdown end every process of the cluster
            until(lambda: pid_gone(replica), 60, f"the replica (pid {replica}) gone with Ray")
        shutil.rmtree(ray_dir, ignore_errors=True)
        # Ray kills its workers: their armed agents' sockets stay until the next agent or
        # injection of this user sweeps them, as here
        sweep_stale_sockets(socket_dir(os.geteuid()))
    assert not clients.errors, clients.errors
    assert "Traceback" not in err, err[-3000:]
    rep = report_json(str(out))
    stages = {s["name"]: s for s in rep["stages"]}

    # the replica's requests, by route, against the clients' own round trips: the proxy's
    # hop (another process, and Ray's RPC) is outside the replica, so the replica's are shorter
    req = rep["requests"]
    assert req is not None and req["count"] >= 50, req
    assert [r["route"] for r in req["by_route"]] == ["POST /embed"], req["by_route"]
    t0 = rep["source"]["start_time"]
    theirs = statistics.median(ms for start, ms in clients.seen if t0 <= start <= t0 + rep["duration_s"])
    ours = req["latency_ms"]["p50"]
    print(f"request p50 {ours:.2f} ms in the replica, {theirs:.2f} ms at the clients")
    assert ours <= theirs * 1.05, (req["latency_ms"], theirs)

    # the tokenizer's and the model's calls, one each a request, as long as the replica's clock
    served = after["served"] - before["served"]
    for stage, truth_key in (("preprocess", "tokenize_ms"), ("forward", "forward_ms")):
        s = stages[stage]
        assert s["calls"] is not None, (stage, s)
        assert 0.8 * req["count"] <= s["calls"] <= served + 5, (stage, s["calls"], req["count"], served)
        truth = statistics.median(after[truth_key][before["served"]:])
        print(f"{stage} p50 {s['latency_ms']['p50']:.3f} ms timed, {truth:.3f} ms in the replica")
        assert s["latency_ms"]["p50"] == pytest.approx(truth, rel=0.25, abs=0.1), (stage, s, truth)
    # a request is its tokenizer call and its model's forward and a little more
    assert ours >= stages["forward"]["latency_ms"]["p50"], (ours, stages["forward"])
