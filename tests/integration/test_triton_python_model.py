"""Latency by default in a Triton Python-backend model (Python 3.12): a real ``model.py`` as
Triton's documentation has one written, driven by ``targets/triton_backend/stub.py``, a stand-in for
Triton's stub process (which no package registry here has) that loads and calls the model as
the stub does. ``infertop record PID`` with no flag times each ``execute`` (a batch of
requests) as a ``forward`` call with its batch size, beside the stub's own clock of it."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

import pytest

from .helpers import ROOT, VENV312, infertop, report_json, status_of, stop_target, until

pytestmark = pytest.mark.slow
STUB = ROOT / "tests" / "integration" / "targets" / "triton_backend" / "stub.py"


@pytest.mark.skipif(not VENV312.exists(), reason=f"needs {VENV312} (make .venv312/.installed)")
def test_triton_s_execute_is_a_forward_call_with_its_batch(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    proc = subprocess.Popen(
        [str(VENV312), str(STUB), "--status", str(status)],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        until(lambda: status_of(status).get("executions", 0) > 20, 90, "the stub's first batches")
        before = status_of(status)
        out = tmp_path / "triton.infertop"
        p = infertop("record", str(proc.pid), "-o", str(out), "--duration", "8", timeout=150)
        assert p.returncode == 0, p.stderr
        after = status_of(status)
    finally:
        _, err = stop_target(proc)
    assert "Traceback" not in err, err[-3000:]
    rep = report_json(str(out))
    fwd = {s["name"]: s for s in rep["stages"]}["forward"]
    done = after["executions"] - before["executions"]
    assert fwd["calls"] is not None and 0.5 * done <= fwd["calls"] <= done, (fwd["calls"], done)
    truth = statistics.median(after["execute_ms"][before["executions"]:])
    print(f"execute p50 {fwd['latency_ms']['p50']:.2f} ms timed, {truth:.2f} ms by the stub")
    assert fwd["latency_ms"]["p50"] == pytest.approx(truth, rel=0.2), (fwd, truth)
    # the batch sizes the calls were timed with are the batches the stub made
    sizes = {b["batch"] for b in fwd["by_batch"]}
    assert sizes and sizes <= set(after["batch"][before["executions"]:]), (fwd["by_batch"], after["batch"][-20:])
