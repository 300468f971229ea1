"""`infertop merge` on real recordings of two real services, made with the real CLI: the text
generation service (one process, recorded without --children) and the multiprocess service
(a router and two workers, recorded with --children). The merged recording reports both
services' processes with their stages, replays, and exports a Chrome trace with a track
group per process."""

from __future__ import annotations

import signal
import socket
import subprocess
import time

import pytest

from infertop.config import Config
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from tests.support.chrome_trace import load, validate

from .helpers import INFERTOP, infertop, report_json, serving

pytestmark = pytest.mark.slow


def test_two_services_merge_into_one_recording_with_every_process(tmp_path) -> None:
    textgen = serving(["samples/textgen_service.py"])
    multi = serving(["samples/multiproc_service.py", "--workers", "2"])
    one, tree = str(tmp_path / "textgen.infertop"), str(tmp_path / "multi.infertop")
    try:
        recs = [
            subprocess.Popen(INFERTOP + ["record", str(pid), *flags, "--no-inject", "-o", out,
                                         "--duration", "3"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
            for pid, flags, out in ((textgen.pid, [], one), (multi.pid, ["--children"], tree))
        ]
        for r in recs:
            _, err = r.communicate(timeout=90)
            assert r.returncode == 0, err
    finally:
        for proc in (textgen, multi):
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)

    out = str(tmp_path / "all.infertop")
    t = time.monotonic()
    p = infertop("merge", one, tree, "-o", out)
    took = time.monotonic() - t
    assert p.returncode == 0, p.stderr
    host = socket.gethostname()
    lines = p.stderr.splitlines()
    assert lines[0].startswith(f"infertop: {one}: host {host}, 1 process (pid {textgen.pid})")
    assert lines[1].startswith(f"infertop: {tree}: host {host}, ")
    assert f"pid {multi.pid}" in lines[1] and "offset +0.000 s" in lines[1]
    assert "clock synchronised" in p.stderr or "clock not synchronised" in p.stderr
    assert "aligned on wall clock" in p.stderr
    print(f"merge of two 3 s recordings: {took:.2f} s (CLI start-up included)")

    rep = report_json(out)
    procs = {q["pid"]: q for q in rep["processes"]}
    assert procs[textgen.pid]["role"] == f"{host} target" and procs[textgen.pid]["host"] == host
    assert procs[multi.pid]["role"] == f"{host} router"
    workers = [q for q in rep["processes"] if q["role"].startswith(f"{host} worker")]
    assert len(workers) == 2 and all(q["ppid"] == multi.pid for q in workers)
    for q in [procs[textgen.pid], *workers]:  # each service's model work shows, per process
        stages = {s["name"]: s["samples"] for s in q["stages"]}
        assert stages.get("forward", 0) > 0, q
    # ... and merged above them (the processes' stages count CPU samples)
    merged = {s["name"]: s["cpu_samples"] for s in rep["stages"]}
    assert merged["forward"] == sum(
        s["samples"] for q in rep["processes"] for s in q["stages"] if s["name"] == "forward"
    )
    text = infertop("report", out).stdout
    assert f"{host} target" in text and f"{host} worker 2" in text

    src = ReplaySource(read_recording(out), Config())  # what `infertop replay` plays
    src.seek(0.0)
    src.seek(src.length)
    assert src.session.processes.keys() == procs.keys()

    trace = str(tmp_path / "all.json")
    assert infertop("export", out, "--format", "chrome", "-o", trace).returncode == 0
    doc = load(trace)
    assert validate(doc).problems == []
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    for q in rep["processes"]:
        if q["samples"]:
            assert q["pid"] in names, (q["pid"], names)
    slices = {e["pid"] for e in doc["traceEvents"] if e.get("ph") == "B"}
    assert {textgen.pid, *(q["pid"] for q in workers)} <= slices
