"""`infertop merge` of recordings with NVML readings: every host's GPUs are devices of their own
in one series of readings, and each host's process lists name that host's processes.

The readings come out of the real NVML layer (``NvmlReader``) reading the fake pynvml of
tests/support/fake_nvml.py, i.e. the recorded fixtures of tests/fixtures/nvml/ — what
tests/unit/test_gpu_recording.py records. Host web2 is the same H100 pair as web1 with its
GPUs' UUIDs made its own (two hosts cannot share a GPU; a UUID is what says "the same GPU");
both targets are pid 4242, so merge renames web2's. Host web3 has a T4 whose driver gives no
process list."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from infertop.analysis.gpu_series import gpu_view
from infertop.collect.nvml import NvmlReader
from infertop.config import Config
from infertop.model.events import Marker
from infertop.model.gpu import GpuReading
from infertop.record.merge import merge_recordings
from infertop.record.reader import read_recording
from infertop.record.writer import RecordingWriter
from infertop.sources import ReplaySource
from tests.support.chrome_trace import validate
from tests.support.cli import Ran, run_cli
from tests.support.fake_nvml import FakeNvml
from tests.support.recordings import T0, session_events

SECONDS = 6
H100_TARGET = 58720256000  # the fixture's target bytes on its first H100
H100_USED = 61203283968


def run(*args: str) -> Ran:
    return run_cli(*args)  # in this process: main([...])


def nvml(fixture: str, phase: float, uuid_tag: str | None) -> list[GpuReading]:
    """Two readings a second from the fixture through the real NVML layer."""
    lib = FakeNvml(fixture, target_pid=4242)
    reader = NvmlReader(4242, lib)
    out = []
    for k in range(SECONDS * 2):
        r = reader.read()
        lib.advance()
        devices = r.devices
        if uuid_tag:
            devices = tuple(replace(d, uuid=f"{d.uuid}-{uuid_tag}") for d in devices)
        out.append(GpuReading(T0 + 0.25 + phase + 0.5 * k, devices))
    reader.close()
    return out


def host_recording(path: Path, host: str, fixture: str, phase: float, uuid_tag: str | None = None,
                   maxerror_us: int = 10_000) -> Path:  # fmt: skip
    """A session as tests/support/recordings.py writes one, with this host's clock anchor and
    NVML readings."""
    readings = nvml(fixture, phase, uuid_tag)
    w = RecordingWriter(str(path))
    for batch in session_events(SECONDS):
        out = []
        for ev in batch:
            if isinstance(ev, GpuReading):
                continue
            if isinstance(ev, Marker) and ev.text == "recording started":
                ev = Marker(ev.t, ev.text, {"host": host, "clock": "synchronised",
                                            "maxerror_us": str(maxerror_us), "esterror_us": "500"})  # fmt: skip
            out.append(ev)
        w.write(out)
    w.write(readings)
    w.close()
    return path


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    d = tmp_path_factory.mktemp("hosts")
    return [
        host_recording(d / "web1.infertop", "web1", "h100_pair.json", 0.0),
        host_recording(d / "web2.infertop", "web2", "h100_pair.json", 0.2, "web2", 8_000),
        host_recording(d / "web3.infertop", "web3", "t4_no_gpm_no_nvlink.json", 0.1, None, 2_000),
    ]


@pytest.fixture(scope="module")
def merged(hosts: list[Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("merged") / "all.infertop"
    p = run("merge", *map(str, hosts), "-o", str(out))
    assert p.returncode == 0, p.stderr
    return out, p.stderr


def test_every_host_s_gpus_are_devices_of_their_own_in_one_reading(merged: tuple[Path, str]) -> None:
    out, _ = merged
    events = read_recording(str(out)).events
    readings = [e for e in events if isinstance(e, GpuReading)]
    assert [r.t for r in readings] == sorted(r.t for r in readings)
    assert len(readings) == SECONDS * 2  # one reading of all hosts per interval, not three
    names = [d.name for d in readings[-1].devices]
    assert names == ["web1 GPU 0 · NVIDIA H100 80GB HBM3", "web1 GPU 1 · NVIDIA H100 80GB HBM3",
                     "web2 GPU 0 · NVIDIA H100 80GB HBM3", "web2 GPU 1 · NVIDIA H100 80GB HBM3",
                     "web3 GPU 0 · Tesla T4"]  # fmt: skip
    assert all([d.index for d in r.devices] == [0, 1, 2, 3, 4] for r in readings[1:])
    assert len({d.uuid for d in readings[-1].devices}) == 5
    # each host's pids: web1's target kept 4242, web2's was renamed, here and in its GPU's list
    inputs = [m for m in events if isinstance(m, Marker) and m.text == "merged input"]
    target = {m.extra["host"]: int(m.extra["target"]) for m in inputs}
    assert target["web1"] == 4242 and target["web2"] != 4242
    web1, web2 = readings[-1].devices[0], readings[-1].devices[2]
    assert dict(web1.processes) == {4242: H100_TARGET, 7001: 2147483648}
    assert dict(web2.processes) == {target["web2"]: H100_TARGET, 7001: 2147483648}
    assert web1.process_memory == web2.process_memory == H100_TARGET
    assert readings[-1].devices[4].memory_used == 15300820992 and readings[-1].devices[4].processes == ()


def test_report_lists_every_gpu_with_its_own_numbers(merged: tuple[Path, str]) -> None:
    out, _ = merged
    p = run("report", str(out), "--format", "json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    util = rep["gpu"]["utilization"]
    assert [u["name"].split(" · ")[0] for u in util] == ["web1 GPU 0", "web2 GPU 0", "web1 GPU 1",
                                                         "web2 GPU 1", "web3 GPU 0"]  # fmt: skip
    assert [u["target"] for u in util] == [True, True, False, False, False]  # targets' GPUs first
    assert all(u["readings"] == SECONDS * 2 for u in util[:4])
    mem = rep["gpu"]["memory"]  # the output's target is web1's: its allocator, its GPU 0
    assert mem["nvml_device"] == 0 and mem["process"] == H100_TARGET and mem["used"] == H100_USED
    assert mem["others"] == H100_USED - H100_TARGET
    procs = {p["role"]: p for p in rep["processes"]}
    assert procs["web1 target"]["gpu_memory_bytes"] == H100_TARGET  # not both hosts' 4242
    assert procs["web2 target"]["gpu_memory_bytes"] == H100_TARGET
    assert procs["web3 target"]["gpu_memory_bytes"] == 0


def test_the_gpu_panel_shows_every_host_s_gpus_at_every_moment(merged: tuple[Path, str]) -> None:
    out, _ = merged
    src = ReplaySource(read_recording(str(out)), Config())
    seen = []
    for frac in (0.3, 0.6, 1.0):
        src.seek(src.length * frac)
        view = gpu_view(src.session.gpu_upto(src.t), [], src.t, 30)
        assert view is not None
        seen.append([d.index for d in view.devices])
        means = dict(zip((d.index for d in view.devices), view.session_means))
        assert means[4]["util_gpu"] is not None  # the T4's own numbers, not an H100's
    assert all(sorted(s) == [0, 1, 2, 3, 4] for s in seen), seen  # no flipping between hosts
    assert seen[-1][:2] == [0, 2]  # the targets' GPUs first


def test_the_chrome_export_has_every_gpu_s_counters_and_validates(merged: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = merged
    trace = tmp_path / "all.json"
    p = run("export", str(out), "--format", "chrome", "-o", str(trace))
    assert p.returncode == 0, p.stderr
    doc = json.loads(trace.read_text())
    rep = validate(doc)
    assert rep.problems == [], rep.problems[:5]
    names = {e["name"] for e in doc["traceEvents"] if e.get("ph") == "C" and e["name"].startswith("GPU")}
    assert {f"GPU{i} utilization (%)" for i in range(5)} <= names
    groups = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert groups[4242] == "python serve.py --port 8000 (pid 4242)"  # web1's target, not the whole
    assert sum(n.startswith("python serve.py --port 8000 (pid ") for n in groups.values()) == 3
    # each host's GPUs are counters in its target's GPU group, idle GPUs too (web2's GPU 1)
    inputs = [m for m in read_recording(str(out)).events if isinstance(m, Marker) and m.text == "merged input"]
    target = {m.extra["host"]: int(m.extra["target"]) for m in inputs}
    where = {e["name"].split()[0]: groups[e["pid"]] for e in doc["traceEvents"]
             if e.get("ph") == "C" and e["name"].endswith("utilization (%)")}  # fmt: skip
    assert where == {"GPU0": "GPU", "GPU1": "GPU", "GPU2": f"GPU · pid {target['web2']}",
                     "GPU3": f"GPU · pid {target['web2']}", "GPU4": f"GPU · pid {target['web3']}"}  # fmt: skip


def test_one_host_twice_sees_its_gpus_once(hosts: list[Path], tmp_path: Path) -> None:
    """Two recordings of one host (two services): the same GPUs (UUIDs), listed once, each
    service's memory on them summed."""
    other = host_recording(tmp_path / "svc2.infertop", "web1", "h100_pair.json", 0.1)
    out = tmp_path / "one-host.infertop"
    merge_recordings([str(hosts[0]), str(other)], str(out))
    readings = [e for e in read_recording(str(out)).events if isinstance(e, GpuReading)]
    last = readings[-1]
    assert [d.index for d in last.devices] == [0, 1]
    assert last.devices[0].process_memory == 2 * H100_TARGET  # both services' targets (pid 4242 twice)


def test_a_hand_given_offset_says_the_accuracy_is_the_user_s(hosts: list[Path], tmp_path: Path) -> None:
    a, b, c = map(str, hosts)
    p = run("merge", a, b, "-o", str(tmp_path / "o.infertop"))
    assert "aligned on wall clock to ±18.0 ms (the inputs' maxerror summed)" in p.stderr
    p = run("merge", a, b, c, "--offset", f"{b}=-0.25", "-o", str(tmp_path / "o2.infertop"))
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert "offset -0.250 s (given by hand), clock synchronised, maxerror 8.0 ms" in lines[1]
    assert "offset +0.000 s, clock" in lines[0]
    acc = lines[3]
    assert "web2.infertop shifted by hand" in acc and "accuracy is yours to judge" in acc
    assert "(the other inputs, on their clocks: ±12.0 ms)" in acc
    events = read_recording(str(tmp_path / "o2.infertop")).events
    whole = next(m for m in events if isinstance(m, Marker) and m.text == "recordings merged")
    assert whole.extra["accuracy_us"] == "unknown" and "yours to judge" in whole.extra["accuracy"]
    given = {m.extra["host"]: m.extra.get("offset_given") for m in events
             if isinstance(m, Marker) and m.text == "merged input"}  # fmt: skip
    assert given == {"web1": None, "web2": "by hand", "web3": None}
