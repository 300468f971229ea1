from __future__ import annotations

import os
import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infertop.errors import BadInputFile
from infertop.model.engine import EngineStats
from infertop.model.events import (
    AllocatorReading,
    CallSamples,
    CollectorStatus,
    CpuWait,
    Frame,
    FrameDef,
    GcPause,
    GenerationCall,
    LoopLag,
    OpWindow,
    SampleWindow,
    StackDef,
    StageRules,
    StageSpan,
    TargetInfo,
    ThreadDef,
)
from infertop.model.host_memory import ObjectCensus
from infertop.record.format import HEADER, MAGIC, MAJOR, MINOR
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
    # 1.6: the agent's GC pauses, event-loop lag and call samples (a child's: trailing pid)
    GcPause(1000.7, 1000.725, 2, 1234, 7),
    GcPause(1000.8, 1000.801, 0, 5, 9, pid=4242),
    LoopLag(1000.9, 0.08, 8),
    CallSamples(100.0, ((7, 1000.51, 1), (7, 1000.52, 0)), ((1000.6, 1000.62),)),
    CallSamples(100.0, (), (), pid=4242),
    # 1.7: a generation call (one of a child's, with what the agent could not see left None)
    GenerationCall(7, 1000.1, 1000.12, 1000.3, 4, 32, 17, 65536, "cpu", 17),
    GenerationCall(9, 1000.4, None, 1000.5, pid=4242),
    CpuWait(1000.0, 1001.0, 4242, 610_000_000, 250_000_000),
    # 1.7: forward calls with their batch sizes (code 19), with and without a request id
    StageSpan(7, "forward", 1000.2, 1000.3, None, 8),
    StageSpan(7, "forward", 1000.3, 1000.35, "req-1", 1),
    # 1.11: the agent's object census (a container no module global holds: name None)
    ObjectCensus(1001.0, 0, 120_000, 0.012, (("dict", 40_000), ("__main__.Request", 900)),
                 ((140_000_000_001, "list", 900, 225_000, "__main__.kept"), (2, "dict", 150, None, None))),
    # 1.12: an LLM engine's scheduler over a window (a child's: its pid)
    EngineStats(1000.5, 1001.0, 0, 12, ((3, 10), (4, 2)), ((0, 12),), ((17, 6), (18, 6)), 0.184, 1, 70, 36,
                120, 48, 0.5, 1.6, 0.0, 0.0875, pid=4242),
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
    assert rec.events == EVENTS and rec.warning is None and rec.version == (MAJOR, MINOR) == (1, 12)


def test_truncated_file_reads_up_to_the_damage(tmp_path) -> None:
    p = str(tmp_path / "a.infertop")
    write(p, [EVENTS[:7], EVENTS[7:]])
    data = open(p, "rb").read()
    rec = parse_recording(data[:-5], p)
    assert rec.events == EVENTS[:7]
    assert rec.warning and "cut short" in rec.warning


@pytest.mark.parametrize("cut", [0, 5, 40, -1])
def test_damage_before_the_first_record_is_unreadable(tmp_path, cut: int) -> None:
    """Cut (or broken) inside the first record, the target's, or right after the header: no
    session to read, so BadInputFile (exit 5), never an empty session of ``pid None``."""
    p = str(tmp_path / "a.infertop")
    write(p, [EVENTS[:7], EVENTS[7:]])
    data = open(p, "rb").read()
    first = HEADER.size + 8 + int.from_bytes(data[HEADER.size : HEADER.size + 4], "big")
    damaged = data[: HEADER.size + cut] if cut >= 0 else data[: first - 1] + b"\x00" + data[first:]
    with pytest.raises(BadInputFile, match="unreadable recording") as exc:
        parse_recording(damaged, p)
    assert exc.value.exit_code == 5 and exc.value.hint is None  # one line
    assert parse_recording(data[: first + 3], p).events == EVENTS[:7]  # past it: read, warned


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
    import zlib

    import msgpack

    from infertop.record.format import RECORD, encode_event

    payload = msgpack.packb([encode_event(e) for e in EVENTS])
    valid += RECORD.pack(len(payload), zlib.crc32(payload)) + payload
    buf.write(valid[: HEADER.size + cut] + noise)
    try:
        rec = parse_recording(buf.getvalue())
    except BadInputFile:
        return
    assert all(e in EVENTS for e in rec.events)


def test_crc_valid_but_malformed_payload_is_a_warning() -> None:
    import zlib

    import msgpack

    from infertop.record.format import RECORD

    from infertop.record.format import encode_event

    # after the target's record (a malformed first record leaves nothing to read: exit 5,
    # test_damage_before_the_first_record_is_unreadable)
    first = msgpack.packb([encode_event(EVENTS[0])])
    payload = msgpack.packb([[5, "not", "a", "window"]])
    data = HEADER.pack(MAGIC, 1, 0) + RECORD.pack(len(first), zlib.crc32(first)) + first
    data += RECORD.pack(len(payload), zlib.crc32(payload)) + payload
    rec = parse_recording(data)
    assert rec.events == EVENTS[:1] and "malformed" in (rec.warning or "")


def test_header_layout_is_stable() -> None:
    assert HEADER.pack(MAGIC, 1, 0) == b"INFERTOP" + struct.pack(">HH", 1, 0)


# -- 1.1: op windows and allocator readings ---------------------------------------------------
def _op_events() -> list:
    import random

    from tests.collect.ops_data import make_allocator, make_op_window

    rng = random.Random(5)
    cpu_only = make_op_window(rng, 1010.0, gpu=False)
    truncated = OpWindow(1020.0, 1020.5, "kineto", 200_000, True)  # nothing but the header
    return [
        make_op_window(rng, 1000.0),
        make_allocator(1000.7),
        cpu_only,
        truncated,
        AllocatorReading(1021.0, 1, 0, 0, 0, 3, 1),
        # 1.4: windows and readings of another process than the target
        replace(make_op_window(rng, 1030.0), pid=4242),
        AllocatorReading(1031.0, 0, 5, 6, 7, 0, 0, pid=4242),
    ]


def test_op_windows_and_allocator_readings_round_trip(tmp_path) -> None:
    p = str(tmp_path / "ops.infertop")
    ops = _op_events()
    write(p, [EVENTS, ops[:2], ops[2:]])
    rec = read_recording(p)
    assert rec.warning is None and rec.events == EVENTS + ops
    w = rec.events[len(EVENTS)]
    assert isinstance(w, OpWindow) and w.paths and w.kernels and w.memcpy and w.gpu is not None
    assert all(isinstance(p.names, tuple) for p in w.paths)


def test_a_process_is_written_only_when_not_the_target() -> None:
    from infertop.record.format import encode_event

    ops = _op_events()
    assert "pid" not in encode_event(ops[0])[1] and len(encode_event(ops[1])) == 8
    assert encode_event(ops[-2])[1]["pid"] == 4242 and encode_event(ops[-1])[-1] == 4242


def test_unknown_codes_are_skipped_by_this_reader() -> None:
    from infertop.record.format import decode_event

    assert decode_event([99, "from", "the", "future"]) is None


def _bad_op_fields():
    """(description, op window event with one field broken)."""
    from infertop.record.format import encode_event

    code, good = encode_event(_op_events()[0])  # code 21: the fields by name
    cases = {
        "t_start is a string": ("t_start", "noon"),
        "truncated is an int": ("truncated", 1),
        "paths is a dict": ("paths", {}),
        "a path's names are a string": ("paths", [["aten::mm", "forward", "cpu", 1, 1.0, 1.0, None]]),
        "a path row is short": ("paths", [[["aten::mm"], "forward", "cpu"]]),
        "a path's count is a float": ("paths", [[["aten::mm"], "forward", "cpu", 1.5, 1.0, 1.0, None]]),
        "an empty name list": ("paths", [[[], "forward", "cpu", 1, 1.0, 1.0, None]]),
        "a kernel's kind is None": ("kernels", [["k", None, 1, 1.0, 1.0, 1.0]]),
        "memcpy bytes are a string": ("memcpy", [["HtoD", "pinned", 1, "8", 1.0]]),
        "a sync is short": ("syncs", [["cudaStreamSynchronize", 1]]),
        "an annotation's tid is None": ("annotations", [["a", None, 1.0, 2.0]]),
        "gpu is a number": ("gpu", 3.0),
        "gpu is short": ("gpu", {"busy_us": 1.0, "span_us": 2.0}),
        "pid is a string": ("pid", "4242"),
    }
    for what, (name, value) in cases.items():
        yield what, [code, {**good, name: value}]
    yield "cut short", [code, {k: good[k] for k in list(good)[:5]}]
    yield "by position, cut short", [11, 1.0, 2.0, "agent", 3, False, [], [], [], []]
    yield "by position, gpu is short", [11, 1.0, 2.0, "agent", 3, False, [], [], [], [], [], [1.0, 2.0]]
    yield "allocator pid is a float", [12, 1.0, 0, 1, 2, 3, 0, 0, 1.5]
    yield "allocator with a string", [12, 1.0, 0, "1", 2, 3, 0, 0]
    yield "allocator cut short", [12, 1.0, 0]


@pytest.mark.parametrize(("what", "event"), list(_bad_op_fields()))
def test_malformed_op_events_are_a_damaged_record(what: str, event: list) -> None:
    import zlib

    import msgpack

    from infertop.record.format import RECORD, decode_event

    with pytest.raises(ValueError):
        decode_event(event)
    good = msgpack.packb([encode(e) for e in EVENTS])
    bad = msgpack.packb([event])
    data = HEADER.pack(MAGIC, 1, 1)
    for payload in (good, bad):
        data += RECORD.pack(len(payload), zlib.crc32(payload)) + payload
    rec = parse_recording(data)
    assert rec.events == EVENTS and "malformed" in (rec.warning or "")


def encode(e):
    from infertop.record.format import encode_event

    return encode_event(e)


_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_fuzzed_op_events_decode_or_raise_value_error(data) -> None:
    from infertop.record.format import decode_event

    ev = encode(data.draw(st.sampled_from(_op_events())))
    # replace one field, or one field of one row, with junk
    i = data.draw(st.integers(1, len(ev) - 1))
    if isinstance(ev[i], list) and ev[i] and data.draw(st.booleans()):
        row = data.draw(st.integers(0, len(ev[i]) - 1))
        if isinstance(ev[i][row], list) and ev[i][row]:
            ev[i] = [list(r) for r in ev[i]]
            j = data.draw(st.integers(0, len(ev[i][row]) - 1))
            ev[i][row][j] = data.draw(_junk)
        else:
            ev[i] = [*ev[i][:row], data.draw(_junk), *ev[i][row + 1 :]]
    else:
        ev[i] = data.draw(_junk)
    if data.draw(st.booleans()):
        ev = ev[: data.draw(st.integers(1, len(ev)))]
    try:
        out = decode_event(ev)
    except ValueError:
        return
    assert isinstance(out, (OpWindow, AllocatorReading))
