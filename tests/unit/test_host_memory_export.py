"""Host memory (recording code 20) in the Chrome export: counters in each process's own group."""

from __future__ import annotations

from support.chrome_trace import load, validate
from support.recordings import T0, session_events

from infertop.cli import main
from infertop.model.events import ProcessDef
from infertop.model.host_memory import CgroupMemory, HostMemoryReading
from infertop.record.writer import RecordingWriter

MIB = 1 << 20
CHILD = 4300


def _reading(t: float, pid: int, rss_mib: int, majors: int, kills: int) -> HostMemoryReading:
    cg = CgroupMemory(2, "/infer.slice", 2048 * MIB, (rss_mib + 100) * MIB, kills)
    return HostMemoryReading(t, pid, rss_mib * MIB, (rss_mib - 60) * MIB, 50 * MIB, 10 * MIB,
                             MIB, 1000, majors, cg)  # fmt: skip


def test_rss_faults_and_the_cgroup_are_counters_of_their_process(tmp_path) -> None:
    batches = session_events(5)
    batches[0].append(ProcessDef(CHILD, 4242, "python worker.py"))
    for k in range(5):
        batches[k + 1] += [_reading(T0 + k, 4242, 700 + k, 10 * k, 1 if k > 2 else 0),
                           _reading(T0 + k, CHILD, 300, 0, 0)]  # fmt: skip
    path = str(tmp_path / "m.infertop")
    w = RecordingWriter(path)
    for b in batches:
        w.write(b)
    w.close()
    out = str(tmp_path / "m.json")
    assert main(["export", path, "--format", "chrome", "-o", out]) == 0
    doc = load(out)
    assert validate(doc).problems == []
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    rss = [e for e in counters if e["name"] == "host memory (MiB)"]
    assert {e["pid"] for e in rss} == {4242, CHILD} and len(rss) == 10
    mine = [e["args"] for e in rss if e["pid"] == 4242]
    assert mine[-1] == {"rss anon": 644.0, "rss file": 50.0, "rss shmem": 10.0, "swap": 1.0}
    faults = [
        e["args"]["major"] for e in counters if e["name"] == "page faults (/s)" and e["pid"] == 4242
    ]
    assert faults == [10.0] * 4  # a rate from the second reading on
    cg = [
        e["args"]
        for e in counters
        if e["name"] == "cgroup v2 /infer.slice (MiB)" and e["pid"] == 4242
    ]
    assert cg[-1] == {"usage": 804.0, "limit": 2048.0}
    kills = [e["args"] for e in counters if e["name"] == "cgroup OOM kills"]
    assert kills == [{"oom kills": 1}] * 2
