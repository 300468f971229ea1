"""Latency by default on a real multi-process server: LitServe (an API process under uvicorn
and a spawned inference worker, dynamic batching) on Python 3.12 and 3.11 (the wrappers' timer:
docs/stages.md), loaded by six clients, and
``infertop record PID --children`` with no other flag: the requests' p50 beside the clients',
per-call latency of the worker's stages, processes named for what they do, and the hop
between them as ``ipc``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from infertop.model.events import GenerationCall
from infertop.record.reader import read_recording
from tests.support.generation_truth import check_against_own

from .helpers import ROOT, VENV312, infertop, report_json, until
from .http_clients import free_port

pytestmark = pytest.mark.slow
APP = ROOT / "tests" / "integration" / "targets" / "litserve_app.py"


VENV311 = ROOT / ".venv" / "bin" / "python"


def _has_litserve(python: Path = VENV312) -> bool:
    """litserve installed in the venv of ``python`` (looked for on disk: collection runs in
    every test worker, and starting that interpreter to import it took 0.9 s each time)."""
    if not python.exists():
        return False
    return any(python.parents[1].glob("lib/python3*/site-packages/litserve/__init__.py"))


class Clients:
    """Six client threads posting until stopped; (end time, latency ms) of each request."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/predict"
        self.stop = threading.Event()
        self.done: list[tuple[float, float]] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(6)]
        for t in self.threads:
            t.start()

    def body(self) -> bytes:
        return json.dumps({"text": "hello world " * 20}).encode()

    def _run(self) -> None:
        body = self.body()
        headers = {"content-type": "application/json"}
        while not self.stop.is_set():
            t = time.perf_counter()
            req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=30) as r:
                r.read()
            self.done.append((time.time(), (time.perf_counter() - t) * 1000))

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def _stop(proc: subprocess.Popen) -> None:
    """LitServe's main process dies on SIGTERM and leaves its API, worker and manager running:
    the server runs in its own process group, and the whole group is stopped."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def _serving(
    tmp_path: Path, argv: list[str], clients: type[Clients], first: int, python: Path = VENV312
) -> Iterator[tuple]:
    """A LitServe server (``argv``: its script and arguments, ``{port}`` its port, else the port
    last) on ``python``, in a process group of its own, answering ``clients`` (``first``
    answers seen); the server and its clients stopped after."""
    port = free_port()
    args = [a.replace("{port}", str(port)) for a in argv]
    if not any("{port}" in a for a in argv):
        args.append(str(port))
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - closed at the end
    proc = subprocess.Popen(
        [str(python), *args], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    running = None
    try:
        until(lambda: _healthy(port), 120, f"LitServe's /health on port {port}")
        running = clients(port)
        until(lambda: len(running.done) > first, 60, "the first answers")
        yield proc, running
    finally:
        if running is not None:
            running.close()
        _stop(proc)
        log.close()


@pytest.mark.parametrize("python", [VENV312, VENV311], ids=["3.12", "3.11"])
def test_a_litserve_server_has_request_and_stage_latency_roles_and_ipc_with_no_flags(
    tmp_path: Path, python: Path
) -> None:
    if not _has_litserve(python):
        pytest.skip(f"needs {python} with litserve (make)")
    out = tmp_path / "litserve.infertop"
    with _serving(tmp_path, [str(APP)], Clients, 50, python) as (proc, clients):
        t0 = time.time()
        p = infertop("record", str(proc.pid), "--children", "-o", str(out), "--duration", "10",
                     timeout=200)  # fmt: skip
        t1 = time.time()
        assert p.returncode == 0, p.stderr
    rep = report_json(str(out))
    # (1) request latency end to end in the API process, beside what the clients measured over
    #     the same seconds (the agent times requests from its start, a few seconds in)
    req = rep["requests"]
    assert req is not None and req["count"] >= 100, req
    theirs = sorted(ms for t, ms in clients.done if t0 + 5 <= t <= t1)
    their_p50 = theirs[len(theirs) // 2]
    ours = req["latency_ms"]["p50"]
    print(f"LitServe ({python.parents[1].name}): request p50 {ours:.1f} ms in the API process, {their_p50:.1f} ms at the clients")
    assert abs(ours - their_p50) <= 0.2 * their_p50, (ours, their_p50)
    assert [r["route"] for r in req["by_route"]] == ["POST /predict"], req["by_route"]
    # (2) per-call latency of the worker's stages: LitAPI's handler methods, timed by default
    stages = {s["name"]: s for s in rep["stages"]}
    for name in ("preprocess", "forward"):
        assert stages.get(name, {}).get("calls"), (name, stages.get(name))
        assert stages[name]["latency_ms"]["p50"] > 0, stages[name]
    assert stages["forward"]["latency_ms"]["p50"] >= 3.5, stages["forward"]  # ≥ 4 ms a request
    # (3) processes named for what they do
    roles = {p["role"] for p in rep["processes"]}
    assert {"litserve api", "litserve inference"} <= roles, roles
    # (4) the hop between them: ipc
    assert stages.get("ipc", {}).get("samples", 0) > 0 or stages.get("ipc", {}).get("cpu_samples", 0) > 0, stages.get("ipc")
    # (5) a request followed into the worker, joined by time (LitServe's calls carry no id):
    #     its decode, its batch's predict, its encode, and the rest as the hop
    assert req["joined"] == "time", req["joined"]
    br = req["breakdown_ms"]
    assert {"preprocess", "forward", "serialize", "ipc"} <= set(br), br
    assert br["forward"]["p50"] == pytest.approx(stages["forward"]["latency_ms"]["p50"], rel=0.5), (br, stages["forward"])
    assert sum(v["p50"] for v in br.values()) <= 1.5 * ours, (br, ours)
    print(f"LitServe: a request's p50 by stage {({k: v['p50'] for k, v in br.items()})}")
    # (6) the worker's batch collection (collate_requests, batch_timeout 20 ms), timed by
    #     default, is the requests' wait for a batch, not their hop; ipc-heavy weighs the hop
    #     against request latency
    assert stages.get("queue", {}).get("calls") and stages["queue"]["latency_ms"]["p50"] <= 25.0, stages.get("queue")
    # only collections that took requests count: each is followed by its batch's predict
    assert stages["queue"]["calls"] <= stages["forward"]["calls"] + 2, (stages["queue"], stages["forward"])
    assert 0 < br["queue"]["p50"] <= 25.0 and br["ipc"]["p50"] < ours / 2, br
    for f in rep["findings"]:
        if f["rule"] == "ipc-heavy":
            assert "of request latency" in f["title"] and f["evidence"]["share_of_latency"] >= 0.15, f
    text = infertop("report", str(out))
    assert "a request's stages, p50/p99 ms (joined by time, approximate)" in text.stdout, text.stdout


GENERATE_APP = ROOT / "tests" / "integration" / "targets" / "litserve_generate.py"


class Prompts(Clients):
    """Six clients asking for completions of prompts of a few lengths."""

    def body(self) -> bytes:
        i = threading.get_ident() % 3  # prompts of three lengths across the clients
        return json.dumps({"prompt": "the quick brown fox jumps over the lazy dog " * (1 + i)}).encode()


@pytest.mark.skipif(not _has_litserve(), reason=f"needs {VENV312} with litserve (make .venv312/.installed)")
def test_generation_calls_in_a_litserve_worker_match_its_own_timing(tmp_path: Path) -> None:
    """A LitServe text-generation server (generate on dynamic batches, in the spawned worker),
    attached with --children and nothing else: the worker's generation calls with TTFT and TPOT
    p50 within 15 % of its own timing, the batch sizes' p50 and max exact, its KV cache's
    largest within 10 % of the size from the model's shape."""
    own, out = tmp_path / "own.jsonl", tmp_path / "generate.infertop"
    with _serving(tmp_path, [str(GENERATE_APP), "{port}", str(own)], Prompts, 30) as (proc, _):
        p = infertop("record", str(proc.pid), "--children", "-o", str(out), "--duration", "15",
                     timeout=200)  # fmt: skip
        assert p.returncode == 0, p.stderr
    rep = report_json(str(out))
    g = rep["generation"]
    assert g is not None and g["calls"] >= 30, g
    calls = [e for e in read_recording(str(out)).events if isinstance(e, GenerationCall)]
    assert {c.pid for c in calls} != {0}, "the calls are the worker's, not the API process's"
    own_rows = [json.loads(line) for line in own.read_text().splitlines()]
    mine = check_against_own("LitServe generate", g, calls, own_rows)
    # the batch beside the queue: LitServe's predict (the forward call) by its list's length
    forward = next(s for s in rep["stages"] if s["name"] == "forward")
    sizes = {b["batch"] for b in forward["by_batch"]}
    assert {c["batch"] for c in mine} <= sizes and max(sizes) == max(c["batch"] for c in mine), forward["by_batch"]
    # prefill and decode in the samples' wall time (how close their split comes to the worker's
    # own is make accuracy's to say)
    wall = {s["name"]: s["share"] for s in rep["stages"]}
    assert {"prefill", "decode"} <= set(wall), wall
