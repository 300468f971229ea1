"""The report's ``memory`` section from recorded host memory readings: RSS first/last/max, swap,
faults per second, growth past warm-up, the cgroup's limit, usage and OOM kills."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infertop.analysis.host_memory import fit_growth, summarize_host_memory
from infertop.cli import main
from infertop.model.events import TargetInfo
from infertop.model.host_memory import CgroupMemory, HostMemoryReading
from infertop.record.writer import RecordingWriter

MIB = 1024**2
RECORDINGS = Path(__file__).parent.parent / "data" / "recordings"


def leak(
    pid: int, seconds: int, rate: float, *, warmup_mib: int = 0, t0: float = 1000.0, kills: int = 0
) -> list[HostMemoryReading]:
    """A process that fills a cache of ``warmup_mib`` in its first 10 s, then grows by ``rate``
    bytes/s; 2 major faults a second; its cgroup has a 2 GiB limit and OOM-killed ``kills``
    processes during the recording (one already before it)."""
    out = []
    for k in range(seconds + 1):
        rss = 400 * MIB + min(k, 10) * warmup_mib * MIB // 10 + int(rate * k)
        cg = CgroupMemory(
            1, "/docker/3f1c9a", 2048 * MIB, rss + 100 * MIB, 1 + (kills if k > seconds // 2 else 0)
        )
        out.append(HostMemoryReading(t0 + k, pid, rss, rss - 50 * MIB, 40 * MIB, 10 * MIB,
                                     (3 * MIB if k > 5 else 0), 10_000 + 50 * k, 100 + 2 * k, cg))  # fmt: skip
    return out


def test_growth_past_warm_up_and_rates() -> None:
    # a leak of 0.5 MB/s behind a 300 MiB cache that fills in the first 10 s, over 45 s
    s = summarize_host_memory(leak(7, 45, 500_000, warmup_mib=300))
    assert s is not None
    (p,) = s.processes
    assert p.rss_first == 400 * MIB and p.rss_max == p.rss_last == 700 * MIB + 45 * 500_000
    assert p.growth_bytes_per_s == pytest.approx(500_000, rel=0.02)
    assert p.growth_r2 is not None and p.growth_r2 > 0.99
    assert p.major_faults_per_s == pytest.approx(2.0) and p.minor_faults_per_s == pytest.approx(
        50.0
    )
    assert p.swap_max == 3 * MIB and p.oom_kills_during == 0
    assert p.headroom == 2048 * MIB - (p.rss_last + 100 * MIB)
    assert s.growth_bytes_per_s == p.growth_bytes_per_s


def test_a_cache_that_fills_and_stays_flat_does_not_grow() -> None:
    # a 300 MiB cache filled in 10 s of a 45-s recording: past warm-up (11 s) it is flat
    (p,) = summarize_host_memory(leak(7, 45, 0.0, warmup_mib=300)).processes  # type: ignore[union-attr]
    assert p.growth_bytes_per_s is not None and abs(p.growth_bytes_per_s) < 1.0


def test_too_short_to_say_and_nothing_read() -> None:
    (p,) = summarize_host_memory(leak(7, 3, 500_000)).processes  # type: ignore[union-attr]
    assert p.growth_bytes_per_s is None and p.rss_last > p.rss_first
    assert fit_growth([]) is None
    assert summarize_host_memory([]) is None
    bare = HostMemoryReading(1.0, 7, None, None, None, None, None, None, None)
    assert summarize_host_memory([bare]) is None


def _recording(path: Path, readings: list[HostMemoryReading]) -> str:
    w = RecordingWriter(str(path))
    w.write([TargetInfo(7, "python serve.py", "3.12.1", None, 1000.0), *readings])
    w.close()
    return str(path)


def _report(capsys: pytest.CaptureFixture[str], path: str, *fmt: str) -> str:
    capsys.readouterr()
    assert main(["report", path, *fmt]) == 0
    return capsys.readouterr().out


def test_report_json_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rs = sorted(leak(7, 45, 500_000, warmup_mib=300, kills=2) + leak(9, 45, 0.0), key=lambda r: r.t)
    path = _recording(tmp_path / "m.infertop", rs)
    rep = json.loads(_report(capsys, path, "--format", "json"))
    keys = list(rep)
    assert keys.index("memory") == keys.index("generation") + 1  # where the spec puts it
    m = rep["memory"]
    assert [p["pid"] for p in m["processes"]] == [7, 9]
    p = m["processes"][0]
    assert p["rss_bytes"] == {
        "first": 400 * MIB,
        "last": 700 * MIB + 45 * 500_000,
        "max": 700 * MIB + 45 * 500_000,
    }
    assert p["swap_bytes"] == 3 * MIB and p["major_faults_per_s"] == 2.0
    assert p["growth_bytes_per_s"] == pytest.approx(500_000, rel=0.02)
    assert p["growth_per_call_bytes"] is None
    assert p["limit_bytes"] == 2048 * MIB and p["usage_bytes"] == p["rss_bytes"]["last"] + 100 * MIB
    assert (p["oom_kills"], p["oom_kills_total"]) == (2, 3)
    assert p["cgroup"] == {"version": 1, "path": "/docker/3f1c9a"}
    assert m["growth_bytes_per_s"] == p["growth_bytes_per_s"]  # the fastest-growing process's
    assert m["processes"][1]["growth_bytes_per_s"] == 0.0
    assert m["torch"] is None and m["growing"] == []
    text = _report(capsys, path)
    assert "host memory (read from /proc and the memory cgroup, outside the target):" in text
    assert "pid 7: rss 400.0 MiB → 721.5 MiB (max 721.5 MiB), growing 48" in text
    assert "2.0 major faults/s" in text
    assert (
        "cgroup v1 /docker/3f1c9a: 821.5 MiB of its 2.00 GiB limit (40%), 1.20 GiB left; "
        "2 OOM kills during the recording" in text
    )


def test_a_recording_made_before_1_8_has_no_memory(capsys: pytest.CaptureFixture[str]) -> None:
    rep = json.loads(
        _report(capsys, str(RECORDINGS / "textgen_service.infertop"), "--format", "json")
    )
    assert rep["memory"] is None
    assert "host memory" not in _report(capsys, str(RECORDINGS / "textgen_service.infertop"))
