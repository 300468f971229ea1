"""Recording format 1.8: host memory readings (code 20) round-trip, live to replay; older files
still read; a merged recording renames their pids; a live session thins them past its horizon."""

from __future__ import annotations

import zlib
from pathlib import Path

import msgpack
import pytest

from infertop.analysis.host_memory import thin
from infertop.analysis.session import Session
from infertop.config import Config
from infertop.model.events import CollectorStatus, ProcessDef, TargetInfo
from infertop.model.host_memory import CgroupMemory, HostMemoryReading
from infertop.record.format import HEADER, MAGIC, MAJOR, MINOR, RECORD, decode_event, encode_event
from infertop.record.incident import EventRing
from infertop.record.merge import merge_recordings
from infertop.record.reader import parse_recording, read_recording
from infertop.record.writer import RecordingWriter
from infertop.sources import LiveSource, ReplaySource

MIB = 1024**2
RECORDINGS = Path(__file__).parent.parent / "data" / "recordings"
CG = CgroupMemory(2, "/infer.slice", 8 << 30, 7 << 30, 2, 8123456, 2345678)


def reading(
    t: float, rss_mib: int, pid: int = 4242, cgroup: CgroupMemory | None = CG
) -> HostMemoryReading:
    rss = rss_mib * MIB
    return HostMemoryReading(t, pid, rss, rss - 64 * MIB, 48 * MIB, 16 * MIB, 0,
                             1000 + int(t), 3, cgroup)  # fmt: skip


def test_code_20_round_trips_with_and_without_a_cgroup(tmp_path: Path) -> None:
    bare = HostMemoryReading(1001.0, 7, None, None, None, None, None, None, None, None)
    events = [TargetInfo(4242, "python serve.py", "3.12.1", None, 1000.0),
              reading(1000.5, 900), reading(1001.5, 901, cgroup=None), bare]  # fmt: skip
    path = str(tmp_path / "m.infertop")
    w = RecordingWriter(path)
    w.write(events)
    w.close()
    rec = read_recording(path)
    assert rec.version == (MAJOR, MINOR) >= (1, 8) and rec.warning is None
    assert rec.events == events
    assert encode_event(events[1])[0] == 20


@pytest.mark.parametrize(
    "bad",
    [
        [20, 1.0, 7, "big", None, None, None, None, None, None, None],  # a size that is text
        [20, 1.0, 7, None, None, None, None, None, None, None, [2, "/", None]],  # a short cgroup
        [20, 1.0, 7, None],  # cut short
        [20, 1.0, 7, 2**70, None, None, None, None, None, None, None],  # beyond 64 bits
    ],
)
def test_a_malformed_reading_does_not_decode(bad: list) -> None:
    with pytest.raises(ValueError):
        decode_event(bad)


def _file(version: tuple[int, int], batch: list) -> bytes:
    payload = msgpack.packb(batch)
    return HEADER.pack(MAGIC, *version) + RECORD.pack(len(payload), zlib.crc32(payload)) + payload


def test_trailing_fields_are_ignored_and_a_1_7_file_still_reads() -> None:
    r = reading(1000.5, 900)
    ev = encode_event(r)
    ev[-1] = [*ev[-1], "later"]
    rec = parse_recording(
        _file((1, 9), [encode_event(TargetInfo(1, None, None, None, 1.0)), [*ev, 42]])
    )
    assert rec.events[1] == r and rec.warning is None
    old = read_recording(str(RECORDINGS / "textgen_service.infertop"))
    assert old.version < (1, 8) and old.warning is None
    assert not any(isinstance(e, HostMemoryReading) for e in old.events)


class _Readings:
    """A collector that hands out host memory readings, as ``HostMemoryCollector`` does."""

    name = "host-memory"

    def __init__(self, events: list) -> None:
        self.events = events

    def start(self) -> None:
        pass

    def poll(self) -> list:
        out, self.events = self.events, []
        return out

    def stop(self) -> None:
        pass


def test_live_to_recording_to_replay(tmp_path: Path) -> None:
    path = str(tmp_path / "live.infertop")
    status = CollectorStatus(1000.0, "host-memory", "running", "every 1 s")
    rs = [reading(1000.0 + k, 900 + k) for k in range(5)]
    src = LiveSource(TargetInfo(4242, "python serve.py", None, None, 1000.0), Config(),
                     [_Readings([status, *rs])], record_path=path)  # fmt: skip
    src.pump()
    assert src.session.host_memory == rs
    src.stop()
    replay = ReplaySource(read_recording(path), Config())
    replay.seek(replay.t1 - replay.t0)
    assert replay.session.host_memory == rs
    assert replay.session.host_memory_upto(1002.0) == rs[:3]


def test_a_merged_recording_renames_the_pids_and_moves_the_times(tmp_path: Path) -> None:
    paths = []
    for i in range(2):
        p = str(tmp_path / f"{i}.infertop")
        w = RecordingWriter(p)
        w.write([TargetInfo(4242, "python serve.py", None, None, 1000.0),
                 ProcessDef(4300, 4242, "python worker.py"),
                 reading(1000.0, 900), reading(1000.0, 500, pid=4300)])  # fmt: skip
        w.close()
        paths.append(p)
    out = str(tmp_path / "merged.infertop")
    merge_recordings(paths, out, {1: 5.0})
    got = [e for e in read_recording(out).events if isinstance(e, HostMemoryReading)]
    assert len(got) == 4 and len({e.pid for e in got}) == 4  # the twins' pids kept apart
    assert sorted(e.t for e in got) == [1000.0, 1000.0, 1005.0, 1005.0]
    assert {e.rss for e in got} == {900 * MIB, 500 * MIB}


def test_watchs_ring_keeps_them_as_timed_events() -> None:
    ring = EventRing(keep_s=10.0)
    ring.add([reading(1000.0 + k, 900) for k in range(30)])
    assert len(ring) == 11  # the last 10 s


def test_thinning_keeps_each_process_first_and_peak() -> None:
    rs = [reading(1000.0 + k, 900 + (50 if k == 17 else 0)) for k in range(120)]
    rs += [reading(1000.5 + k, 300, pid=7) for k in range(120)]
    rs.sort(key=lambda r: r.t)
    kept = thin(rs)
    assert len(kept) < 20 and thin(kept) == kept
    mine = [r for r in kept if r.pid == 4242]
    assert mine[0] == rs[0] and max(r.rss or 0 for r in mine) == 950 * MIB
    assert next(r for r in kept if r.pid == 7).t == 1000.5
    session = Session(retain_s=20.0)
    for r in rs:
        session.apply(r)
    assert len(session.host_memory) < 100
    assert max(r.rss or 0 for r in session.host_memory) == 950 * MIB
    assert session.host_memory[0] == rs[0] and session.host_memory[-1] == rs[-1]
