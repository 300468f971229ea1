from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infertop.errors import BadInputFile
from infertop.model.events import (
    CollectorStatus,
    Frame,
    FrameDef,
    SampleWindow,
    StackDef,
    StageRules,
    StageSpan,
    TargetInfo,
    ThreadDef,
)
from infertop.record.format import HEADER, MAGIC
from infertop.record.reader import parse_recording, read_recording
from infertop.record.writer import RecordingWriter

EVENTS = [
    TargetInfo(42, "python serve.py", "3.11.7", None, 1000.0),
    StageRules((("preprocess", "*server.py:encode_batch"),)),
    ThreadDef(7, "MainThread"),
    FrameDef(0, Frame("<module>", "/srv/serve.py", 3)),
    FrameDef(1, Frame("dumps", "/usr/lib/python3.11/json/__init__.py", 231)),
    StackDef(0, (0,)),
    StackDef(1, (0, 1)),
    SampleWindow(1000.0, 1001.0, 100.0, 100, ((7, 0, 60), (7, 1, 30)), 0, 0.0, 2),
    CollectorStatus(1001.0, "py-spy", "running", "100 Hz"),
    StageSpan(7, "serialize", 1000.5, 1000.6),
]


def write(path: str, batches: list[list]) -> None:
    w = RecordingWriter(path)
    for b in batches:
        w.write(b)
    w.close()


def test_round_trip_is_exact(tmp_path) -> None:
    p = str(tmp_path / "a.infertop")
    write(p, [EVENTS[:7], EVENTS[7:]])
    rec = read_recording(p)
    assert rec.events == EVENTS and rec.warning is None and rec.version == (1, 0)


def test_truncated_file_reads_up_to_the_damage(tmp_path) -> None:
    p = str(tmp_path / "a.infertop")
    write(p, [EVENTS[:7], EVENTS[7:]])
    data = open(p, "rb").read()
    rec = parse_recording(data[:-5], p)
    assert rec.events == EVENTS[:7]
    assert rec.warning and "cut short" in rec.warning


def test_flipped_byte_stops_at_that_record(tmp_path) -> None:
    p = str(tmp_path / "a.infertop")
    write(p, [EVENTS[:7], EVENTS[7:]])
    data = bytearray(open(p, "rb").read())
    data[-3] ^= 0xFF
    rec = parse_recording(bytes(data), p)
    assert rec.events == EVENTS[:7] and "checksum" in (rec.warning or "")


@pytest.mark.parametrize("data", [b"", b"INFER", b"\x00" * 64, os.urandom(4096), b'{"traceEvents": []}'])
def test_not_a_recording_is_exit_5(data: bytes) -> None:
    with pytest.raises(BadInputFile) as exc:
        parse_recording(data, "x")
    assert exc.value.exit_code == 5


def test_newer_major_version_is_refused() -> None:
    with pytest.raises(BadInputFile, match="newer"):
        parse_recording(HEADER.pack(MAGIC, 2, 0), "future.infertop")


def test_missing_file_is_exit_5(tmp_path) -> None:
    with pytest.raises(BadInputFile):
        read_recording(str(tmp_path / "nope.infertop"))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=400))
def test_fuzzed_recordings_never_raise_anything_but_bad_input(noise: bytes, cut: int) -> None:
    import io

    buf = io.BytesIO()
    # a valid file, cut and followed by noise
    path = "/dev/null"
    w = RecordingWriter.__new__(RecordingWriter)
    del w, path
    valid = HEADER.pack(MAGIC, 1, 0)
    from infertop.record.format import RECORD, encode_event
    import msgpack
    import zlib

    payload = msgpack.packb([encode_event(e) for e in EVENTS])
    valid += RECORD.pack(len(payload), zlib.crc32(payload)) + payload
    buf.write(valid[: HEADER.size + cut] + noise)
    try:
        rec = parse_recording(buf.getvalue())
    except BadInputFile:
        return
    assert all(e in EVENTS for e in rec.events)


def test_crc_valid_but_malformed_payload_is_a_warning() -> None:
    import msgpack
    import zlib

    from infertop.record.format import RECORD

    payload = msgpack.packb([[5, "not", "a", "window"]])
    data = HEADER.pack(MAGIC, 1, 0) + RECORD.pack(len(payload), zlib.crc32(payload)) + payload
    rec = parse_recording(data)
    assert rec.events == [] and "malformed" in (rec.warning or "")


def test_header_layout_is_stable() -> None:
    assert HEADER.pack(MAGIC, 1, 0) == b"INFERTOP" + struct.pack(">HH", 1, 0)
