"""A WSGI server's requests with no flags: gunicorn with two sync workers serving a Flask app
(``targets/wsgi_app.py``), loaded by two clients, and ``infertop record MASTER --children``:
the requests' p50/p95/p99 by route beside the clients', each worker's request joined to its own
calls (no hop between processes), the master named as the supervisor. Runs on each Python
here (the dev venv's, 3.12's) whose packages have flask and gunicorn; skipped where none has."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .helpers import ROOT, VENV312, infertop, report_json, stop_target, until
from .http_clients import JsonClients, free_port

pytestmark = pytest.mark.slow
TARGETS = ROOT / "tests" / "integration" / "targets"
VENV311 = ROOT / ".venv" / "bin" / "python"


def _has_wsgi(python: Path) -> bool:
    """flask and gunicorn importable by ``python`` (its packages, or PYTHONPATH's)."""
    find = "import importlib.util as u, sys; sys.exit(not (u.find_spec('flask') and u.find_spec('gunicorn')))"
    return subprocess.run([str(python), "-c", find], capture_output=True, timeout=60).returncode == 0


@pytest.mark.parametrize("python", [VENV311, VENV312], ids=["venv", "3.12"])
def test_gunicorn_flask_requests_are_timed_by_route(tmp_path: Path, python: Path) -> None:
    if not python.exists() or not _has_wsgi(python):
        pytest.skip(f"needs flask and gunicorn installed for {python}")
    port = free_port()
    proc = subprocess.Popen(
        [str(python), "-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}", "--chdir", str(TARGETS),
         "wsgi_app:app"],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    clients = None
    try:
        import urllib.request

        def up() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        until(up, 60, "gunicorn to serve")
        clients = JsonClients(port, "/predict", n=2)
        until(lambda: len(clients.seen) > 50, 60, "the first requests")
        out = tmp_path / "wsgi.infertop"
        p = infertop("record", str(proc.pid), "--children", "-o", str(out), "--duration", "12", timeout=150)
        assert p.returncode == 0, p.stderr
    finally:
        if clients is not None:
            clients.close()
        stop_target(proc)
    assert clients is not None and not clients.errors, clients.errors
    rep = report_json(str(out))
    req = rep["requests"]
    assert req is not None and req["count"] >= 100, req
    assert [r["route"] for r in req["by_route"]] == ["POST /predict"], req["by_route"]
    theirs = sorted(ms for _, ms in clients.seen)
    their_p50 = theirs[len(theirs) // 2]
    # in the worker, from the app's call to the close of its body: under the clients' round
    # trip, which adds the connection, gunicorn's parsing and the clients' own time
    assert 0 < req["latency_ms"]["p50"] <= their_p50, (req["latency_ms"], their_p50)
    print(f"requests p50 {req['latency_ms']['p50']:.2f} ms in the workers, {their_p50:.2f} ms at the clients")
    # each request joined to its own worker's calls (json.dumps): no hop between the workers
    assert "ipc" not in req["breakdown_ms"], req["breakdown_ms"]
    roles = {p["pid"]: p["role"] for p in rep["processes"]}
    assert roles[proc.pid] == "supervisor", roles
