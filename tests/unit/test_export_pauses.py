"""The Chrome export of the agent's GC pauses and event-loop lag (docs/export.md), on the
committed recording of ``pauses_target.py`` (29 full collections on the main thread, an event
loop blocked 80 ms a second; tests/data/recordings/README.md)."""

from __future__ import annotations

import pytest
from support.chrome_trace import load, validate

from infertop.export.run import export
from infertop.model.events import GcPause, LoopLag, ThreadDef
from infertop.record.stream import RecordingStream
from tests.support import data

RECORDING = data.DATA / "recordings" / "tail_pauses.infertop"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list]:
    if not RECORDING.is_file():
        pytest.fail(f"test data missing: {RECORDING}")
    out = str(tmp_path_factory.mktemp("chrome") / "tail_pauses.json")
    export(str(RECORDING), "chrome", out)
    return load(out), list(RecordingStream(str(RECORDING)))


def _track_names(doc: dict) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }


def test_each_collection_is_a_slice_on_its_thread_s_gc_track(exported) -> None:
    doc, events = exported
    assert validate(doc).problems == []  # nested, balanced, numeric: what Perfetto loads
    pauses = [e for e in events if isinstance(e, GcPause)]
    main = next(e for e in events if isinstance(e, ThreadDef) and e.name == "MainThread")
    assert len(pauses) == 29 and {p.tid for p in pauses} == {main.tid}
    names = _track_names(doc)
    slices = [e for e in doc["traceEvents"] if e.get("cat") == "gc"]
    assert len(slices) == 29
    # all on one track, named after the main thread and kept with its other tracks
    assert {names[(e["pid"], e["tid"])] for e in slices} == {"GC · MainThread"}
    calls = [e for e in doc["traceEvents"] if e.get("cat") == "stage call"]
    assert {e["pid"] for e in slices} == {e["pid"] for e in calls}
    assert {e["name"] for e in slices} == {"GC gen 2"}
    t0 = doc["otherData"]["t0_unix_s"]
    for p, s in zip(sorted(pauses, key=lambda p: p.t_start), sorted(slices, key=lambda e: e["ts"])):
        assert s["ph"] == "X"
        assert s["ts"] == pytest.approx((p.t_start - t0) * 1e6, abs=0.01)
        assert s["dur"] == pytest.approx((p.t_end - p.t_start) * 1e6, abs=0.01)
        assert s["args"] == {
            "generation": 2,
            "collected": p.collected,
            "pause ms": round((p.t_end - p.t_start) * 1000, 3),
        }
    total_ms = sum(s["dur"] for s in slices) / 1000
    assert total_ms == pytest.approx(584.709, abs=0.01)  # the report's gc.generations total


def test_the_loop_s_lag_is_a_counter_named_after_its_thread(exported) -> None:
    doc, events = exported
    lags = [e for e in events if isinstance(e, LoopLag)]
    loop = next(e for e in events if isinstance(e, ThreadDef) and e.tid == lags[0].tid)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C" and "lag" in e["name"]]
    assert {e["name"] for e in counters} == {f"event loop lag ms · {loop.name}"}
    assert len(counters) == len(lags) == 145
    values = [e["args"]["lag"] for e in counters]
    assert values == [round(x.lag_s * 1000, 3) for x in lags]
    assert 70 < max(values) < 80  # the loop blocked 80 ms once a second, seen late by a beat


def test_tracks_are_named_after_threads_defined_later_in_the_recording(exported) -> None:
    """The agent's first pauses and calls come before the thread definitions: the first pass
    over the recording knows the names."""
    doc, _ = exported
    names = set(_track_names(doc).values())
    assert {"stage calls · MainThread", "GC · MainThread", "MainThread"} <= names
    assert not [n for n in names if "thread 1" in n]
