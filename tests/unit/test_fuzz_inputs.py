"""Fuzzing every reader of outside data (hypothesis): recordings, torch.profiler traces, py-spy
output and TOML configs. Whatever the bytes, the answer is the product's own: data, a warning,
or one ``InfertopError`` (exit 5 for input files, 2 for configs), never another exception, a
NaN in JSON, or a numpy warning. The protocol's frames are fuzzed in tests/agent/test_protocol.py.

The recordings here are valid files whose events were changed *after* encoding and written
with correct checksums, so the damage reaches the decoders and everything after them (replay,
report, export, diff), not just the CRC check.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import tempfile
import warnings
import zlib
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infertop.collect.pyspy import parse_raw
from infertop.config import Config, load_config
from infertop.errors import BadInputFile, InfertopError, UsageError
from infertop.record.format import HEADER, MAGIC, RECORD, encode_event
from infertop.record.reader import read_recording
from infertop.record.stream import RecordingStream
from tests.support import data
from tests.support.recordings import session_events

ALEXNET = data.TRACES / "a100_alexnet_pageable_memcpy.json.gz"

#: values that break naive readers: wrong types, NaN and infinities, 64-bit edges, huge numbers
ODD = [
    None, True, -1, 0, 2**40, -(2**63), 2**64 - 1, 1e308, -1e308, float("nan"), float("inf"),
    -0.0, "", "x", "*", [], [1], [[]], {}, {"a": 1}, 3.5, 1e-300, 10**6,
]  # fmt: skip


def _mutate_events(batches: list[list], rng: random.Random) -> bytes:
    """The encoded session with 1-3 events changed, dropped or repeated, as file bytes."""
    enc = [[encode_event(e) for e in b] for b in batches]
    for _ in range(rng.randint(1, 3)):
        b = rng.choice(enc)
        i = rng.randrange(len(b))
        ev = b[i]
        op = rng.random()
        if op < 0.1:
            del b[i]
            continue
        if op < 0.15:
            b.insert(rng.randrange(len(b) + 1), list(ev))
            continue
        j = rng.randrange(1, len(ev)) if len(ev) > 1 else 0
        if isinstance(ev[j], list) and ev[j] and rng.random() < 0.6:
            row = ev[j]
            k = rng.randrange(len(row))
            if isinstance(row[k], list) and row[k] and rng.random() < 0.6:
                row[k][rng.randrange(len(row[k]))] = rng.choice(ODD)
            else:
                row[k] = rng.choice(ODD)
        else:
            ev[j] = rng.choice(ODD)
    data = HEADER.pack(MAGIC, 1, 2)
    for b in enc:
        payload = msgpack.packb(b, use_bin_type=True)
        data += RECORD.pack(len(payload), zlib.crc32(payload)) + payload
    return data


def _everything_a_user_can_do_with(path: str, out_dir: str) -> None:
    """report (three formats), replay at three playheads, export (three formats), diff."""
    from infertop.analysis.snapshot import build_snapshot
    from infertop.compare.diff import as_json, compare
    from infertop.compare.profile import load_profile
    from infertop.compare.render import render_text as diff_text
    from infertop.export.run import export
    from infertop.report.build import build_report
    from infertop.report.text import render_markdown, render_text
    from infertop.sources import ReplaySource

    rec = read_recording(path)
    stream = RecordingStream(path)
    assert list(stream) == rec.events and stream.warning == rec.warning  # the same damage
    src = ReplaySource(rec, Config())
    rep = build_report(build_snapshot(src.session, t=src.t, notes=src.notes), "recording", path)
    json.dumps(rep, allow_nan=False)  # strict JSON: no NaN or Infinity reaches a report
    render_text(rep)
    render_markdown(rep)
    for position in (0.0, src.length / 2, src.length):
        src.seek(position)
        build_snapshot(src.session, t=src.t)
    profile = load_profile(path)
    res = compare(profile, profile, 5.0)
    diff_text(res)
    json.dumps(as_json(res), allow_nan=False)
    for fmt in ("chrome", "speedscope", "kineto"):
        export(path, fmt, os.path.join(out_dir, f"out.{fmt}.json"))


def _only_product_errors(run) -> None:  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy overflow warning is a bug too
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                run()
            except BadInputFile:
                pass


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_mutated_recordings_read_or_refuse_cleanly(rng: random.Random) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.infertop")
        Path(path).write_bytes(_mutate_events(session_events(3), rng))
        _only_product_errors(lambda: _everything_a_user_can_do_with(path, d))


def test_a_sample_of_an_undefined_stack_is_damage_not_a_crash(tmp_path) -> None:
    """Found by the fuzzing above: a checksum-valid record whose samples named a stack that was
    never defined reached replay (IndexError, exit 1 'internal error')."""
    batches = session_events(3)
    enc = [[encode_event(e) for e in b] for b in batches]
    window = enc[2][0]  # the second second's sample window: [5, t0, t1, rate, ticks, flat, ...]
    window[5] = [101, 99, 10]  # stack 99 does not exist
    data = HEADER.pack(MAGIC, 1, 2)
    for b in enc:
        payload = msgpack.packb(b, use_bin_type=True)
        data += RECORD.pack(len(payload), zlib.crc32(payload)) + payload
    path = tmp_path / "undefined.infertop"
    path.write_bytes(data)
    rec = read_recording(str(path))
    assert rec.warning and "malformed" in rec.warning
    assert sum(1 for b in batches[:2] for _ in b) == len(rec.events)  # read up to the damage


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e308])
def test_a_time_that_is_not_a_time_is_damage(tmp_path, value: float) -> None:
    """Found by the fuzzing above: a NaN time reached `report --format json` as `NaN` (not JSON)
    and an infinite or huge one overflowed the Chrome export."""
    enc = [[encode_event(e) for e in b] for b in session_events(2)]
    enc[2][1] = [7, 101, "preprocess", value, 1.0]  # a stage span in the second second
    data = HEADER.pack(MAGIC, 1, 2)
    for b in enc:
        payload = msgpack.packb(b, use_bin_type=True)
        data += RECORD.pack(len(payload), zlib.crc32(payload)) + payload
    path = tmp_path / "time.infertop"
    path.write_bytes(data)
    rec = read_recording(str(path))
    assert rec.warning and "malformed" in rec.warning
    _everything_a_user_can_do_with(str(path), str(tmp_path))


# -- torch.profiler traces ---------------------------------------------------------------------
def _mutate_trace(base: dict, rng: random.Random) -> dict:
    doc = json.loads(json.dumps(base))
    events = doc["traceEvents"]
    odd = [*ODD[:8], *ODD[10:], 1e18, -5.0, "ProfilerStep#1", "kernel", "cpu_op", "gpu_memcpy",
           "X", "Memcpy HtoD (Pageable -> Device)"]  # fmt: skip  (JSON has no NaN)
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.05:
            doc[rng.choice(list(doc))] = rng.choice(odd)
            continue
        ev = rng.choice(events) if isinstance(events, list) and events else None
        if not isinstance(ev, dict):
            continue
        if r < 0.1:
            events.remove(ev)
        elif r < 0.15:
            events.append(dict(ev))
        else:
            key = rng.choice([*ev, "args", "dur", "ts", "ph", "cat", "name", "pid", "tid"])
            args = ev.get("args")
            if key == "args" and isinstance(args, dict) and rng.random() < 0.7:
                args[rng.choice([*args, "correlation", "External id", "bytes", "device"])] = (
                    rng.choice(odd)
                )
            else:
                ev[key] = rng.choice(odd)
    return doc


def _everything_on_a_trace(path: str, out_dir: str) -> None:
    from infertop.compare.diff import compare
    from infertop.compare.profile import load_profile
    from infertop.compare.render import render_text as diff_text
    from infertop.export.run import export
    from infertop.record.importer import import_trace
    from infertop.report.trace import build_trace_report, render_trace_text

    rep = build_trace_report(path)
    json.dumps(rep, allow_nan=False)
    render_trace_text(rep)
    profile = load_profile(path)
    diff_text(compare(profile, profile, 5.0))
    for fmt in ("chrome", "speedscope"):
        export(path, fmt, os.path.join(out_dir, f"out.{fmt}.json"))
    imported = os.path.join(out_dir, "imported.infertop")
    import_trace(path, imported, lambda _text: None)
    _everything_a_user_can_do_with(imported, out_dir)


@pytest.fixture(scope="module")
def alexnet() -> dict:
    with gzip.open(data.trace(ALEXNET.name)) as fh:
        return json.load(fh)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
@pytest.mark.slow  # in-process, but seconds long: not in make test-fast
def test_mutated_traces_read_or_refuse_cleanly(alexnet: dict, rng: random.Random) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        Path(path).write_text(json.dumps(_mutate_trace(alexnet, rng)))
        _only_product_errors(lambda: _everything_on_a_trace(path, d))


def test_a_trace_spanning_weeks_is_refused_by_export(tmp_path) -> None:
    """Found by the fuzzing above: export overflowed int64 nanoseconds with a numpy warning
    (and wrote garbage times) where `import` refuses such a trace."""
    from infertop.export.run import export

    ops = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": ts, "dur": 5, "pid": 1,
            "tid": 1} for ts in (0.0, 1e300)]  # fmt: skip
    path = tmp_path / "weeks.json"
    path.write_text(json.dumps({"traceEvents": ops}))
    for fmt in ("chrome", "speedscope"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(BadInputFile, match="span more than 11 days"):
                export(str(path), fmt, str(tmp_path / f"o.{fmt}.json"))


# -- py-spy's raw output ------------------------------------------------------------------------
_TOKENS = st.sampled_from(
    ["thread (", "0x", "08", "12", ")", ": ", "MainThread", ";", " (", "/srv/a.py", ":", "42",
     " ", "\n", "²", "٣", "<module>", "(", "))", "0x7fz", "-1", "99999999999999999999"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_TOKENS | st.text(max_size=4), max_size=40))
def test_pyspy_output_never_raises(parts: list[str]) -> None:
    rows, bad = parse_raw("".join(parts))
    assert bad >= 0
    for tid, name, frames, count in rows:
        assert isinstance(tid, int) and isinstance(name, str) and count >= 0
        assert all(isinstance(f.line, int) for f in frames)


def test_pyspy_thread_ids_and_counts_that_broke_the_parser() -> None:
    """Found by the fuzzing above: a decimal tid with a leading zero was read as octal (and
    raised), and a count of non-ASCII digits passed isdigit() but not int()."""
    rows, bad = parse_raw("thread (0815): worker;f (a.py:1) 3\nthread (1): x;f (a.py:1) ²\n")
    assert rows == [(815, "worker", rows[0][2], 3)] and bad == 1


# -- TOML configs ---------------------------------------------------------------------------------
_SECTIONS = ["collect", "stages", "findings", "other"]
_KEYS = ["rate", "window", "preprocess", "my-stage", "idle", "a=b", "tiny_ops_us",
         "fragmentation_min_bytes", "memcpy_small_bytes", "unknown"]  # fmt: skip
_TOML_VALUES = ["1", "0", "-3", "1e400", "inf", "nan", "-inf", "true", '"x"', '"*a.py:f"',
                '["a", "b"]', "[1, 2]", "{a = 1}", "1979-05-27", '""', '"="']  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_SECTIONS), st.sampled_from(_KEYS), st.sampled_from(_TOML_VALUES)
        ),
        max_size=6,
    ),
    st.text(max_size=12),
)
def test_configs_load_or_are_one_usage_error(entries: list, noise: str) -> None:
    by_section: dict[str, list[str]] = {}
    for section, key, value in entries:
        by_section.setdefault(section, []).append(f'"{key}" = {value}')
    text = "".join(
        f"[{s}]\n" + "\n".join(dict.fromkeys(lines)) + "\n" for s, lines in by_section.items()
    )
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False, encoding="utf-8") as fh:
        fh.write(text + noise)
    try:
        cfg = load_config(fh.name)
    except UsageError as exc:
        assert "Traceback" not in str(exc)
        return
    finally:
        os.unlink(fh.name)
    assert 0 < cfg.collect.rate_hz < float("inf") and 0 < cfg.collect.window_s < float("inf")
    written = {key for section, key, _ in entries if section == "stages"}
    assert {stage for stage, _ in cfg.stage_rules} <= written  # a stage is named as written
    for name in cfg.findings.__dataclass_fields__:
        value = getattr(cfg.findings, name)
        assert 0 < value < float("inf"), (name, value)


def test_infinite_thresholds_are_refused() -> None:
    """Found by the fuzzing above: `inf` for an integer threshold raised OverflowError (exit 1,
    'internal error') and `nan` was accepted as a threshold no number ever crosses."""
    for text in ("[findings]\nfragmentation_min_bytes = inf\n", "[findings]\ntiny_ops_us = nan\n",
                 "[collect]\nrate = inf\n"):  # fmt: skip
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as fh:
            fh.write(text)
        try:
            with pytest.raises(InfertopError, match="must be a positive number"):
                load_config(fh.name)
        finally:
            os.unlink(fh.name)


# -- through the command line, as a user meets it -----------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_report_and_export_of_a_mutated_recording_through_the_cli(tmp_path, seed: int) -> None:
    """Exit 0 (with a one-line warning when the damage cut the reading short) or exit 5 with
    one message; never a traceback, never 'internal error'."""
    from tests.support.cli import run_cli

    path = tmp_path / "m.infertop"
    path.write_bytes(_mutate_events(session_events(3), random.Random(seed)))
    chrome = ["export", str(path), "--format", "chrome", "-o", str(tmp_path / "o.json")]
    for args in (["report", str(path), "--format", "json"], chrome):
        p = run_cli(*args)  # in this process: main([...])
        assert p.returncode in (0, 5), (args, p.returncode, p.stderr)
        assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
        lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("  hint:")]
        if p.returncode == 5:
            assert len(lines) == 1 and lines[0].startswith("infertop: "), p.stderr
        else:
            assert all(ln.startswith("infertop: ") for ln in lines), p.stderr
            if args[0] == "report":
                json.loads(p.stdout)
                assert "NaN" not in p.stdout and "Infinity" not in p.stdout  # json.loads takes them


def test_a_trace_with_64_bit_thread_ids_imports_and_reads_back(tmp_path) -> None:
    """Kineto thread and process ids can be 64-bit values: they stay within the numbers a
    recording holds, so `import` writes them and every reader takes them."""
    from infertop.record.importer import import_trace

    big = 2**62 + 12345
    events = []
    for k in range(20):
        ts = 1000.0 + 100 * k
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "ts": ts,
             "dur": 90, "pid": big, "tid": big},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": ts + 1, "dur": 50,
             "pid": big, "tid": big},
        ]  # fmt: skip
    trace = tmp_path / "big_tids.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "big.infertop"
    import_trace(str(trace), str(out), lambda _text: None)
    rec = read_recording(str(out))
    assert rec.warning is None
    assert any(a.tid == big for w in rec.events for a in getattr(w, "annotations", ()))
    _everything_a_user_can_do_with(str(out), str(tmp_path))
