"""Request latency of a real ASGI app with no flags: a Starlette app under uvicorn on Python
3.12, loaded by clients in another process; ``infertop record PID`` gives the requests' p50/p95/
p99 (the agent times Starlette's ``__call__`` for HTTP scopes) and names the function the slow
requests have and the typical ones lack."""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from .helpers import ROOT, VENV312, infertop, report_json, status_of, stop_target, until

pytestmark = pytest.mark.slow
APP = ROOT / "tests" / "integration" / "targets" / "asgi_app.py"



class Clients:
    """Three client threads posting to /embed until stopped; their own latencies (ms)."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/embed"
        self.stop = threading.Event()
        self.latencies: list[float] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(3)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        body = ("hello world " * 30).encode()
        while not self.stop.is_set():
            t = time.perf_counter()
            with urllib.request.urlopen(urllib.request.Request(self.url, data=body, method="POST"), timeout=30) as r:
                r.read()
            self.latencies.append((time.perf_counter() - t) * 1000)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


@pytest.mark.skipif(not VENV312.exists(), reason=f"needs {VENV312} (make .venv312/.installed: Python 3.12 with starlette, uvicorn)")
def test_requests_of_an_asgi_app_have_latency_and_a_tail_with_no_flags(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    proc = subprocess.Popen(
        [str(VENV312), str(APP), "--status", str(status), "--rare-every", "40"],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    clients = None
    try:
        port = until(lambda: status_of(status).get("port"), 60, "the app's port")
        clients = Clients(port)
        until(lambda: status_of(status).get("served", 0) > 50, 60, "the first requests")
        out = tmp_path / "asgi.infertop"
        p = infertop("record", str(proc.pid), "-o", str(out), "--duration", "12", timeout=150)
        assert p.returncode == 0, p.stderr
    finally:
        if clients is not None:
            clients.close()
        _, err = stop_target(proc)
    assert "Traceback" not in err, err
    rep = report_json(str(out))
    request = next(s for s in rep["stages"] if s["name"] == "request")
    assert request["calls"] >= 200, request
    lat = request["latency_ms"]
    theirs = sorted(clients.latencies)
    their_p50 = theirs[len(theirs) // 2]
    # in the app, from its first await to its last send: under the clients' round trip
    assert 0.5 < lat["p50"] <= their_p50, (lat, their_p50)
    assert lat["p99"] >= 25, lat  # one request in 40 blocks ~30 ms in slow_lookup
    # the same requests in `requests`, named by route, and their latency beside the clients'
    req = rep["requests"]
    routes = {r["route"]: r for r in req["by_route"]}
    assert set(routes) == {"POST /embed"}, req["by_route"]
    assert routes["POST /embed"]["count"] == req["count"] >= request["calls"] - 5, (req, request)
    assert req["per_s"] and req["per_s"] > 10, req
    print(f"requests p50 {req['latency_ms']['p50']:.2f} ms in the app, {their_p50:.2f} ms at the clients")
    tail = request["tail"]
    assert tail["frames"][0]["name"] == "slow_lookup", tail["frames"][:3]
    assert tail["frames"][0]["typical_share"] < 0.1
