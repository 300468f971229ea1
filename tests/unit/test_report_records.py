"""The report's sections are typed records, the deeper ones too: a stage's ``tail``, ``gc``,
``event_loop``, ``requests`` and ``generation`` (their JSON: tests/unit/test_golden_outputs.py)."""

from __future__ import annotations

import typing

from msgspec import UNSET

from infertop.config import Config
from infertop.record.reader import read_recording
from infertop.report import records
from infertop.report.recording import recording_report
from tests.support import data

RECORDINGS = data.DATA / "recordings"


def test_the_sections_are_declared_as_records() -> None:
    report = typing.get_type_hints(records.Report)
    for name, rec in (("gc", records.Gc), ("event_loop", records.EventLoop),
                      ("requests", records.Requests), ("generation", records.Generation)):  # fmt: skip
        assert report[name] == rec | None
    assert typing.get_type_hints(records.Stage)["tail"] == records.Tail | None


def test_a_recording_s_report_holds_them_as_records() -> None:
    pauses = recording_report(read_recording(str(RECORDINGS / "tail_pauses.infertop")), Config()).record
    assert isinstance(pauses.gc, records.Gc) and isinstance(pauses.event_loop, records.EventLoop)
    tails = [st.tail for st in pauses.stages if st.tail is not None]
    assert tails and all(isinstance(t, records.Tail) for t in tails)
    hf = recording_report(read_recording(str(RECORDINGS / "textgen_hf.infertop")), Config()).record
    assert isinstance(hf.generation, records.Generation)
    assert hf.generation.batch_size is not None and hf.generation.batch_size.mean is not UNSET
    assert hf.generation.new_tokens is not None and hf.generation.new_tokens.mean is UNSET
