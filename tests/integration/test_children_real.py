"""--children against the real multiprocess sample: every worker sampled, a killed worker
noticed while the others carry on, and the report's per-process section."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from infertop.collect.tree import descendants, read_cmdline
from infertop.model.events import FrameDef, Marker, SampleWindow, StackDef, ThreadDef
from infertop.record.reader import read_recording

from .helpers import INFERTOP, ROOT, infertop, report_json, serving, until, workers_of

pytestmark = pytest.mark.slow


def _forward_sampled(path: str) -> set[int]:
    """The pids whose threads have samples in ``forward`` in the recording written so far."""
    try:
        events = read_recording(path).events
    except Exception:  # noqa: BLE001 - not there yet, or its header not yet written
        return set()
    owner = {e.tid: e.pid for e in events if isinstance(e, ThreadDef)}
    frames = {e.frame_id: e.frame for e in events if isinstance(e, FrameDef)}
    stacks = {e.stack_id: e.frames for e in events if isinstance(e, StackDef)}
    out = set()
    for w in events:
        if isinstance(w, SampleWindow):
            for tid, sid, _n in w.counts:
                if any("forward" in frames[f].function for f in stacks.get(sid, ())):
                    out.add(owner.get(tid, 0))
    return out


def test_record_children_follows_every_worker_and_survives_one_dying(tmp_path) -> None:
    sample = serving(["samples/multiproc_service.py", "--workers", "3"])
    out = str(tmp_path / "tree.infertop")
    try:
        workers = workers_of(sample.pid)
        assert len(workers) == 3
        rec = subprocess.Popen(
            INFERTOP + ["record", str(sample.pid), "--children", "--no-inject", "-o", out,
                        "--duration", "8"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # every worker sampled in its forward before one dies (a busy machine's py-spy is slow)
        until(lambda: _forward_sampled(out) >= set(workers), 60, "samples of every worker's forward")
        victim = workers[-1]
        os.kill(victim, signal.SIGKILL)
        _, err = rec.communicate(timeout=60)
        assert rec.returncode == 0, err
        assert sample.poll() is None  # the service carries on
    finally:
        sample.send_signal(signal.SIGTERM)
        stdout, _ = sample.communicate(timeout=30)
    assert f"(pid {victim}) exited" in stdout  # the router noticed too

    events = read_recording(out).events
    owner = {e.tid: e.pid for e in events if isinstance(e, ThreadDef)}
    gone = [m for m in events if isinstance(m, Marker) and m.extra.get("pid") == str(victim)]
    assert len(gone) == 1 and "exited" in gone[0].text
    after: dict[int, int] = {}
    for w in events:
        if isinstance(w, SampleWindow) and w.t_start > gone[0].t:
            for tid, _sid, n in w.counts:
                after[owner.get(tid, 0)] = after.get(owner.get(tid, 0), 0) + n
    for pid in workers[:-1]:
        assert after.get(pid, 0) > 0, f"worker {pid} got no samples after {victim} died"
    assert after.get(victim, 0) == 0

    rep = report_json(out)
    procs = {p["pid"]: p for p in rep["processes"]}
    assert procs[sample.pid]["role"] == "router" and procs[sample.pid]["ppid"] is None
    for pid in workers:
        stages = {s["name"]: s for s in procs[pid]["stages"]}
        # named for what they do: each runs the model (docs/processes.md)
        assert procs[pid]["ppid"] == sample.pid and procs[pid]["role"].startswith("inference")
        assert stages["forward"]["samples"] > 0, (pid, procs[pid])
        assert (procs[pid]["exited_after_s"] is not None) == (pid == victim)
    # the processes' stages count CPU samples: the merged ones' CPU samples are their sum
    merged = {s["name"]: s["cpu_samples"] for s in rep["stages"]}
    assert merged["forward"] == sum(
        s["samples"] for p in rep["processes"] for s in p["stages"] if s["name"] == "forward"
    )
    text = infertop("report", out).stdout
    assert f"pid {victim}" in text and "exited after" in text

    trace = str(tmp_path / "tree.json")
    assert infertop("export", out, "--format", "chrome", "-o", trace).returncode == 0
    names = {
        e["args"]["name"]
        for e in json.load(open(trace))["traceEvents"]
        if e.get("name") == "thread_name"
    }
    for pid in workers:  # every worker's main thread has a track of its own, named by process
        assert f"pid {pid} MainThread" in names


def test_without_children_only_the_target_is_sampled(tmp_path) -> None:
    from .helpers import start_target, stop_target

    target = start_target([str(ROOT / "tests/integration/targets/annotated.py")])
    out = str(tmp_path / "one.infertop")
    try:
        p = infertop("record", str(target.pid), "--no-inject", "-o", out, "--duration", "2")
        assert p.returncode == 0, p.stderr
    finally:
        stop_target(target)
    assert report_json(out)["processes"] is None
    assert "processes (" not in infertop("report", out).stdout


def test_non_python_children_are_listed_without_samples(tmp_path) -> None:
    from .helpers import start_target, stop_target

    target = start_target([str(ROOT / "tests/integration/targets/tree_parent.py")])
    out = str(tmp_path / "mixed.infertop")
    try:
        until(lambda: len(descendants(target.pid)) >= 2, 30, "both children to start")
        kids = {
            read_cmdline(p).split(" ")[0].rsplit("/", 1)[-1]: p for p in descendants(target.pid)
        }
        p = infertop("record", str(target.pid), "--children", "--no-inject", "-o", out,
                     "--duration", "3")  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert "3 processes" in p.stderr  # the progress line counts them
    finally:
        stop_target(target)
    procs = {p["pid"]: p for p in report_json(out)["processes"]}
    assert procs[kids["sleep"]]["samples"] == 0 and procs[kids["sleep"]]["role"] == "child (sleep)"
    worker = next(pid for name, pid in kids.items() if name != "sleep")
    assert procs[worker]["role"] == "worker 1" and procs[worker]["samples"] > 10
    assert procs[worker]["stages"][0]["name"] == "other"
