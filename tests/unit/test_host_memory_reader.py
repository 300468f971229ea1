"""Host memory read outside the target: /proc and cgroup files recorded from v1 and v2 hosts,
and a real child process that allocates."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from infertop import procfs
from infertop.collect.host_memory import (
    CgroupMounts,
    HostMemoryCollector,
    HostMemoryReader,
    parse_pressure,
)
from infertop.model.host_memory import HostMemoryReading

FIXTURES = Path(__file__).parent.parent / "fixtures" / "host_memory"
KIB, MIB, GIB = 1024, 1024**2, 1024**3


def _reader(host: str) -> HostMemoryReader:
    """A reader of a recorded host: its /proc, its mount table, its cgroup files where they
    were mounted (under the fixture's directory)."""
    root = str(FIXTURES / host)
    m = CgroupMounts.of(procfs.mountinfo("self", f"{root}/proc"))
    moved = CgroupMounts(
        None if m.v2 is None else (m.v2[0], root + m.v2[1]),
        None if m.v1_memory is None else (m.v1_memory[0], root + m.v1_memory[1]),
    )
    return HostMemoryReader(f"{root}/proc", moved)


def test_v2_rss_split_swap_faults_and_the_slice_that_holds_the_limit() -> None:
    r = _reader("v2").read(4242, t=100.0)
    assert r is not None and r.t == 100.0 and r.pid == 4242
    assert (r.rss_anon, r.rss_file, r.rss_shmem) == (1843200 * KIB, 204800 * KIB, 65536 * KIB)
    assert r.rss == r.rss_anon + r.rss_file + r.rss_shmem
    assert r.swap == 20 * MIB
    # comm "python3 a) b" holds a parenthesis: the fields count from the last one
    assert (r.minor_faults, r.major_faults) == (915664, 312)
    cg = r.cgroup
    assert cg is not None and cg.version == 2
    # the service's own memory.max is "max": its slice's 8 GiB is the limit that binds
    assert cg.path == "/infer.slice" and cg.limit == 8 * GIB
    assert cg.usage == 7516192768 and cg.oom_kills == 2
    assert (cg.pressure_some_us, cg.pressure_full_us) == (8123456, 2345678)


def test_v1_in_a_container_whose_mount_root_is_its_cgroup() -> None:
    reader = _reader("v1")
    assert reader.mounts.v1_memory is not None and reader.mounts.v1_memory[0] == "/docker/3f1c9a"
    assert reader.mounts.v2 is None
    r = reader.read(77)
    assert r is not None
    assert r.rss == (524288 + 102400) * KIB and r.rss_shmem == 0 and r.swap == 0
    assert (r.minor_faults, r.major_faults) == (48211, 3)
    cg = r.cgroup
    assert cg is not None
    assert (cg.version, cg.path, cg.limit, cg.usage, cg.oom_kills) == (
        1,
        "/docker/3f1c9a",
        2 * GIB,
        1932735283,
        3,
    )
    assert cg.pressure_some_us is None  # v1 has no PSI file


def test_no_limit_and_no_cgroup(tmp_path: Path) -> None:
    # v1's "unlimited" is a page-counter maximum, not a limit
    root = tmp_path / "host"
    (root / "proc" / "5").mkdir(parents=True)
    for name in ("status", "stat"):
        (root / "proc" / "5" / name).write_text(
            (FIXTURES / "v1" / "proc" / "77" / name).read_text()
        )
    (root / "proc" / "5" / "cgroup").write_text("4:memory:/\n")
    cg = root / "memory"
    cg.mkdir()
    (cg / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (cg / "memory.usage_in_bytes").write_text("4839710720\n")
    (cg / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")  # before 4.13
    r = HostMemoryReader(str(root / "proc"), CgroupMounts(None, ("/", str(cg)))).read(5)
    assert r is not None and r.cgroup is not None
    assert (r.cgroup.limit, r.cgroup.usage, r.cgroup.oom_kills) == (None, 4839710720, None)
    # no memory hierarchy mounted: the process's own numbers still come
    r = HostMemoryReader(str(root / "proc"), CgroupMounts(None, None)).read(5)
    assert r is not None and r.cgroup is None and r.rss == (524288 + 102400) * KIB
    assert HostMemoryReader(str(root / "proc")).read(6) is None  # gone


def test_status_sizes_and_pressure_lines() -> None:
    st = procfs.parse_status("VmRSS:\t  2160 kB\nRssAnon:\t 148 kB\nKthread:\t0\n")
    assert procfs.status_bytes(st, "VmRSS") == 2160 * KIB
    assert procfs.status_bytes(st, "VmSwap") is None
    assert parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n") == (7, None)
    assert parse_pressure(None) == (None, None)
    mounts = procfs.parse_mountinfo(
        r"41 31 0:38 / /sys/fs/cgroup/my\040dir rw - cgroup2 cgroup2 rw" "\n"
    )
    assert mounts[0].point == "/sys/fs/cgroup/my dir" and CgroupMounts.of(mounts).v2 == (
        "/",
        "/sys/fs/cgroup/my dir",
    )


ALLOCATES = """
import sys, time
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
block = bytearray(200 * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
sys.stdout.write("allocated\\n"); sys.stdout.flush()
sys.stdin.readline()
"""


def _deadline_until(check, seconds: float = 30.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + seconds
    while True:
        got = check()
        if got or time.monotonic() > end:
            return got
        time.sleep(0.05)


def test_a_real_process_that_allocates_200_mb_shows_it() -> None:
    child = subprocess.Popen([sys.executable, "-c", ALLOCATES], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    collector = HostMemoryCollector(child.pid, interval=0.05)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "ready\n"
        collector.start()
        seen: list[HostMemoryReading] = []

        def readings() -> list[HostMemoryReading]:
            seen.extend(e for e in collector.poll() if isinstance(e, HostMemoryReading))
            return seen

        assert _deadline_until(readings), "no reading of the child"
        first = seen[0]
        assert first.pid == child.pid and first.rss is not None and first.minor_faults is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "allocated\n"

        def grown() -> bool:
            readings()
            return max(r.rss or 0 for r in seen) >= first.rss + 150 * MIB  # type: ignore[operator]

        assert _deadline_until(grown), f"rss {first.rss} -> {max(r.rss or 0 for r in seen)}"
        last = seen[-1]
        # touching new memory faults it in (how many faults: one per page, or far fewer with
        # transparent huge pages)
        assert last.minor_faults is not None and first.minor_faults is not None
        assert last.minor_faults > first.minor_faults
        assert last.rss_anon is not None and first.rss_anon is not None
        assert last.rss_anon - first.rss_anon >= 150 * MIB  # anonymous memory, not files
    finally:
        collector.stop()
        child.kill()
        child.wait()
    assert collector.status().collector == "host-memory"
