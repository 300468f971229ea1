"""Op windows by field name (code 21), and the recordings before it (code 11, by position),
still read: tests/data/recordings/ops_by_position.infertop is a format-1.5 recording kept as
it was written."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import pytest

from infertop.model.events import GpuActivity, KernelStat, OpPath, OpTime, OpWindow
from infertop.model.fields import decode_op_window, op_window_fields
from infertop.record.format import HEADER, RECORD, decode_event, encode_event
from infertop.record.ops_format import OPS, OPS_BY_NAME
from infertop.record.reader import read_recording

OLD = Path(__file__).resolve().parents[1] / "data" / "recordings" / "ops_by_position.infertop"

WINDOW = OpWindow(
    10.0, 10.25, "agent", 120, False,
    paths=(OpPath(("aten::linear", "aten::addmm"), "forward", "cpu", 4, 900.0, 700.0, None),),
    kernels=(KernelStat("gemm", "compute", 4, 80.0, 15.0, 25.0),),
    gpu=GpuActivity(80.0, 250_000.0, 120_000.0),
    op_time=OpTime(12, 900.0, 1_400.0, 1_300.0, 60.0),
    pid=77,
)  # fmt: skip


def raw_codes(path: Path) -> list[int]:
    """The code of every event in a recording, read without infertop's reader."""
    data = path.read_bytes()
    pos, codes = HEADER.size, []
    while pos < len(data):
        length, _crc = RECORD.unpack_from(data, pos)
        pos += RECORD.size
        codes += [ev[0] for ev in msgpack.unpackb(data[pos : pos + length], raw=False)]
        pos += length
    return codes


def test_an_old_recording_s_op_windows_still_open() -> None:
    assert OPS in raw_codes(OLD) and OPS_BY_NAME not in raw_codes(OLD)  # by position
    rec = read_recording(str(OLD))
    assert rec.warning is None and rec.version == (1, 5)
    windows = [e for e in rec.events if isinstance(e, OpWindow)]
    assert windows and all(w.source == "agent" and w.paths for w in windows)
    assert windows[0].op_time is not None and windows[0].op_time.run_us is None  # 1.2's three
    for w in windows:  # written again, they are by name and read back the same
        raw = encode_event(w)
        assert raw[0] == OPS_BY_NAME and isinstance(raw[1], dict)
        assert decode_event(msgpack.unpackb(msgpack.packb(raw), raw=False)) == w


def test_a_window_by_name_round_trips_and_names_its_fields() -> None:
    raw = encode_event(WINDOW)
    assert raw[1]["op_time"] == {"ops": 12, "in_ops_us": 900.0, "wall_us": 1_400.0, "run_us": 1_300.0,
                                 "wait_us": 60.0}  # fmt: skip
    assert raw[1]["gpu"] == {"busy_us": 80.0, "span_us": 250_000.0, "max_gap_us": 120_000.0}
    assert decode_event(raw) == WINDOW
    target = OpWindow(1.0, 2.0, "kineto", 0, True)
    assert "pid" not in op_window_fields(target) and decode_event(encode_event(target)) == target


def by_position(w: OpWindow, op_time: list[Any] | None, pid: list[int]) -> list[Any]:
    """``w`` as code 11 laid it out (1.1: no op_time; 1.2: three fields of it, later five; 1.4:
    a trailing pid for a process not the target)."""
    f = op_window_fields(w)
    gpu = None if f["gpu"] is None else list(f["gpu"].values())
    head = [OPS, f["t_start"], f["t_end"], f["source"], f["events"], f["truncated"], f["paths"],
            f["kernels"], f["memcpy"], f["syncs"], f["annotations"], gpu]  # fmt: skip
    return head + ([] if op_time is None and not pid else [op_time]) + pid


def test_every_layout_code_11_had_is_read() -> None:
    t = WINDOW.op_time
    assert t is not None
    target = replace(WINDOW, pid=0)
    assert decode_event(by_position(target, None, [])) == replace(target, op_time=None)  # 1.1
    three = [t.ops, t.in_ops_us, t.wall_us]
    assert decode_event(by_position(target, three, [])) == replace(
        target, op_time=OpTime(t.ops, t.in_ops_us, t.wall_us)
    )  # 1.2
    assert decode_event(by_position(target, [*three, t.run_us, t.wait_us], [])) == target
    assert decode_event(by_position(WINDOW, [*three, t.run_us, t.wait_us], [77])) == WINDOW  # 1.4


@pytest.mark.parametrize(
    "bad",
    [
        [OPS, 1.0, 2.0, "agent", 3, False, [], [], [], []],  # a field short
        [OPS_BY_NAME, [1.0, 2.0]],  # not a mapping
        [OPS_BY_NAME, {**op_window_fields(WINDOW), "truncated": 1}],
        [OPS_BY_NAME, {**op_window_fields(WINDOW), "gpu": [1.0, 2.0, 3.0]}],
        [OPS_BY_NAME, {k: v for k, v in op_window_fields(WINDOW).items() if k != "paths"}],
        [OPS_BY_NAME, op_window_fields(WINDOW), "extra"],
    ],
)
def test_a_malformed_window_is_damage(bad: list[Any]) -> None:
    with pytest.raises(ValueError):
        decode_event(bad)


def test_the_agent_s_message_is_read_by_the_same_names() -> None:
    fields = op_window_fields(WINDOW)
    del fields["source"], fields["pid"]
    msg = {"v": 1, "type": "window", "seq": 3, "cost_s": 0.01, **fields}
    msg["op_time"] = {**msg["op_time"], "tid": 4242}  # the agent also names the op thread
    assert decode_op_window({**msg, "source": "agent"}) == replace(WINDOW, pid=0)
