"""Recording format 1.2: NVML readings (code 13) round-trip; older files and damage still read."""

from __future__ import annotations

import zlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infertop.collect.nvml import NvmlReader
from infertop.model.events import CollectorStatus, TargetInfo
from infertop.model.gpu import GpuReading
from infertop.record.format import HEADER, MAGIC, MAJOR, MINOR, RECORD, decode_event, encode_event
from infertop.record.reader import parse_recording, read_recording
from infertop.record.writer import RecordingWriter
from tests.support.fake_nvml import FakeNvml

PRELUDE = [TargetInfo(4242, "python serve.py", "3.11.7", None, 1000.0),
           CollectorStatus(1000.0, "nvml", "running", "2 GPU(s), every 0.5 s")]  # fmt: skip


def readings(fixture: str = "h100_pair.json", n: int = 3) -> list[GpuReading]:
    """What the NVML layer reads from the fixture, stamped half a second apart."""
    lib = FakeNvml(fixture, target_pid=4242)
    reader = NvmlReader(4242, lib)
    out = []
    for k in range(n):
        r = reader.read()
        out.append(GpuReading(1000.0 + 0.5 * k, r.devices))
        lib.advance()
    reader.close()
    return out


def _file(version: tuple[int, int], batches: list[list]) -> bytes:
    data = HEADER.pack(MAGIC, *version)
    for batch in batches:
        payload = msgpack.packb(batch)
        data += RECORD.pack(len(payload), zlib.crc32(payload)) + payload
    return data


@pytest.mark.parametrize("fixture", ["h100_pair.json", "t4_no_gpm_no_nvlink.json"])
def test_readings_round_trip_exactly_with_every_gap(tmp_path, fixture: str) -> None:
    rs = readings(fixture)
    path = str(tmp_path / "gpu.infertop")
    w = RecordingWriter(path)
    w.write(PRELUDE + rs[:1])
    w.write(rs[1:])
    w.close()
    rec = read_recording(path)
    assert rec.version == (MAJOR, MINOR) and rec.warning is None
    assert rec.events == PRELUDE + rs
    d = rec.events[2].devices[0]
    if fixture.startswith("t4"):  # what NVML could not give stays "not available"
        assert d.process_memory is None and d.nvlink_tx_kbs is None and d.dram_bw_util is None
        assert d.throttle == ("sw_thermal", "hw_thermal")
    else:
        assert d.processes == ((4242, 58720256000), (7001, 2147483648))
        assert rec.events[3].devices[0].tensor_util == 0.0  # GPM from the second reading on


def test_a_1_1_file_without_readings_still_reads() -> None:
    rec = parse_recording(_file((1, 1), [[encode_event(e) for e in PRELUDE]]))
    assert rec.version == (1, 1) and rec.events == PRELUDE and rec.warning is None


def test_a_reader_that_predates_code_13_skips_it() -> None:
    """A 1.1 reader treats 13 as an unknown code; this reader skips unknown codes the same way."""
    ev = encode_event(readings(n=1)[0])
    assert ev[0] == 13
    future = [99, *ev[1:]]
    rec = parse_recording(_file((1, 2), [[encode_event(PRELUDE[0]), future]]))
    assert rec.events == PRELUDE[:1] and rec.warning is None


def test_later_trailing_fields_are_ignored() -> None:
    r = readings(n=1)[0]
    ev = encode_event(r)
    ev[2] = [row + [123, "a metric from 1.3"] for row in ev[2]]
    assert decode_event([*ev, "trailing"]) == r


def _broken(what: str) -> list:
    ev = encode_event(readings(n=1)[0])
    row = list(ev[2][0])
    if what == "t is a string":
        ev[1] = "noon"
    elif what == "devices is a dict":
        ev[2] = {}
    elif what == "a device row is short":
        ev[2] = [row[:5]]
    elif what == "memory is a float":
        row[3] = 1.5
        ev[2] = [row]
    elif what == "throttle is a string":
        row[16] = "sw_power_cap"
        ev[2] = [row]
    elif what == "processes is odd":
        row[20] = [4242]
        ev[2] = [row]
    elif what == "cut short":
        ev = ev[:2]
    return ev


@pytest.mark.parametrize("what", ["t is a string", "devices is a dict", "a device row is short",
                                  "memory is a float", "throttle is a string", "processes is odd",
                                  "cut short"])  # fmt: skip
def test_a_malformed_reading_is_a_damaged_record(what: str) -> None:
    with pytest.raises(ValueError):
        decode_event(_broken(what))
    data = _file((1, 2), [[encode_event(e) for e in PRELUDE], [_broken(what)]])
    rec = parse_recording(data)
    assert rec.events == PRELUDE and "malformed" in (rec.warning or "")


_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzzed_readings_decode_or_raise_value_error(data) -> None:
    ev = encode_event(readings(n=2)[1])
    i = data.draw(st.integers(0, len(ev[2][0]) - 1))
    row = list(ev[2][0])
    row[i] = data.draw(_junk)
    ev[2] = [row, *ev[2][1:]]
    try:
        out = decode_event(ev)
    except ValueError:
        return
    assert isinstance(out, GpuReading)
