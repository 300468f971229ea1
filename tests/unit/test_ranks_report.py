"""`infertop report DIR` of a directory of per-rank traces reports what `import DIR` + `report`
report (the processes section, the straggler finding), and the Chrome export of a rank or
merged recording names each process's group after that process.

The traces are the real ones of tests/data/traces; the slower rank is a real trace transformed
(stretched by 1.3: tests/support/kineto_ranks.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.support.chrome_trace import validate
from tests.support.cli import Ran, run_cli
from tests.support.kineto_ranks import rank_dir


def run(*args: str) -> Ran:
    return run_cli(*args)  # in this process: main([...])


def test_report_of_a_directory_is_the_imported_recording_s_report(tmp_path: Path) -> None:
    d = rank_dir(tmp_path, "a100_sampled_rank0", [1.0, 1.0, 1.3])
    t = time.monotonic()
    p = run("report", str(d), "--format", "json")
    took = time.monotonic() - t
    assert p.returncode == 0, p.stderr
    direct = json.loads(p.stdout)
    out = tmp_path / "ranks.infertop"
    assert run("import", str(d), "-o", str(out)).returncode == 0
    imported = json.loads(run("report", str(out), "--format", "json").stdout)
    assert direct["source"] == {"kind": "kineto", "path": str(d), "start_time": imported["source"]["start_time"]}
    assert [r["rank"] for r in direct["ranks"]] == [0, 1, 2]  # each trace's own report, as before
    assert all(r["source"]["kind"] == "kineto" and r["ops"] for r in direct["ranks"])
    assert direct["import_notes"][0].startswith("3 ranks, one process each; ranks on one host")
    for key in ("processes", "findings", "ops", "gpu", "duration_s", "target", "stages"):
        assert direct[key] == imported[key], key
    (straggler,) = [f for f in direct["findings"] if f["rule"] == "straggler"]
    slow = next(p for p in direct["processes"] if p["role"] == "rank 2")
    assert straggler["pid"] == slow["pid"] and straggler["severity"] == "high"
    text = run("report", str(d)).stdout
    assert "processes (3;" in text and f"straggler (pid {slow['pid']}): rank 2" in text
    assert "each rank's own trace report: infertop report FILE" in text.splitlines()[-1]
    md = run("report", str(d), "--format", "markdown").stdout
    assert md.count("# infertop report") == 1 and f"`straggler` (pid {slow['pid']})" in md
    print(f"report of 3 ranks of a100_sampled_rank0: {took:.2f} s")


def test_a_directory_of_one_trace_is_that_trace_s_report(tmp_path: Path) -> None:
    d = rank_dir(tmp_path, "a100_sampled_rank0", [1.0])
    rep = json.loads(run("report", str(d), "--format", "json").stdout)
    assert [r["rank"] for r in rep["ranks"]] == [0] and "processes" not in rep


def process_names(doc: dict) -> dict[int, str]:
    return {
        e["pid"]: e["args"]["name"]
        for e in doc["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "process_name"
    }


def test_chrome_groups_of_ranks_are_named_after_their_rank(tmp_path: Path) -> None:
    d = rank_dir(tmp_path, "a100_sampled_rank0", [1.0, 1.0, 1.0])
    rec = tmp_path / "ranks.infertop"
    assert run("import", str(d), "-o", str(rec)).returncode == 0
    trace = tmp_path / "ranks.json"
    p = run("export", str(rec), "--format", "chrome", "-o", str(trace))
    assert p.returncode == 0, p.stderr
    doc = json.loads(trace.read_text())
    rep = validate(doc)
    assert rep.problems == [], rep.problems[:5]
    names = process_names(doc)
    ranks = sorted(n for n in names.values() if n.startswith("rank "))
    assert [n.split(" (")[0] for n in ranks] == ["rank 0", "rank 1", "rank 2"], names
    assert not any("ranks of" in n for n in names.values())  # no group named after the whole
    assert names[4037] == "rank 0 (a100_sampled_rank0_rank0.json.gz) (pid 4037)"
    labels = [e["args"]["labels"] for e in doc["traceEvents"] if e.get("name") == "process_labels"]
    assert labels and labels[0].startswith("in 3 ranks of ")  # the whole, as the first group's label
