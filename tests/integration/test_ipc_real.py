"""The hop between processes is the ``ipc`` stage, and ``ipc-heavy`` says when it costs: a real
two-process server in miniature (tests/integration/targets/ipc_hop.py: the parent sends each
request's payload to a worker over a ``multiprocessing`` pipe), recorded with ``--children``."""

from __future__ import annotations

import select
import subprocess
import sys
import time

import pytest

from .helpers import ROOT, infertop, report_json, shares, stop_target

pytestmark = pytest.mark.slow
HOP = str(ROOT / "tests" / "integration" / "targets" / "ipc_hop.py")


def _serving(items: int, forward_ms: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, HOP, "--items", str(items), "--forward-ms", str(forward_ms)], cwd=ROOT,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            assert proc.stdout.readline().strip() == "ready"
            return proc
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    stop_target(proc)
    raise AssertionError(f"pid {proc.pid} never answered its first request")


def _record(tmp_path, items: int, forward_ms: int = 5) -> dict:  # noqa: ANN001
    target = _serving(items, forward_ms)
    out = str(tmp_path / f"hop-{items}.infertop")
    try:
        p = infertop("record", str(target.pid), "--children", "--no-inject", "-o", out,
                     "--duration", "6")  # fmt: skip
        assert p.returncode == 0, p.stderr
    finally:
        _, err = stop_target(target)
    assert err == "", err
    return report_json(out)


def test_pickling_big_payloads_between_processes_is_ipc_and_heavy(tmp_path) -> None:
    rep = _record(tmp_path, 200_000)  # a list of 200k floats pickled on every hop
    s = shares(rep)
    assert s.get("ipc", 0.0) >= 0.15, s
    found = [f for f in rep["findings"] if f["rule"] == "ipc-heavy"]
    assert found, rep["findings"]
    where = " ".join(found[0]["where"])
    assert "ForkingPickler.dumps" in where or "Connection._send" in where, found[0]
    # the parent, which pickles and sends, is where the report says it happens
    router = next(p for p in rep["processes"] if p["role"] == "router")
    assert any(f["rule"] == "ipc-heavy" for f in router.get("findings", [])), router


def test_small_messages_between_processes_raise_nothing(tmp_path) -> None:
    # a model call of 20 ms, not 5: the parent's send counts the time it waits for a CPU after
    # each answer wakes it, a few ms a hop on a loaded machine, and beside two CPU hogs and the
    # suite's other workers that was 18 % of a 5 ms forward's hop (a fresh-clone run under load)
    rep = _record(tmp_path, 100, forward_ms=20)
    # a few per cent: the parent does little else while it is not waiting
    assert shares(rep).get("ipc", 0.0) < 0.15, shares(rep)
    assert not [f for f in rep["findings"] if f["rule"] == "ipc-heavy"], rep["findings"]
