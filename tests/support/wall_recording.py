"""A recording with wall and CPU windows: a pipeline thread in a tokenizer that releases the
GIL, and a helper thread that only sleeps (for the wall view's tests)."""

from __future__ import annotations

from pathlib import Path

from infertop.analysis.session import Session
from infertop.collect.pyspy import RawSampleWindow
from infertop.model.events import Frame, TargetInfo
from infertop.record.writer import RecordingWriter

LOOP = Frame("serve", "/srv/app/server.py", 10)
ENCODE = (LOOP, Frame("TokenizersBackend._encode_plus", "/v/transformers/tokenization_utils_tokenizers.py", 88))
FORWARD = (LOOP, Frame("BertModel.forward", "/v/transformers/models/bert/modeling_bert.py", 900))
HELPER = (Frame("helper", "/srv/app/metrics.py", 5),)
TARGET = TargetInfo(pid=777, cmdline="python server.py", python="3.11.7", torch="2.13.0", started=1.8e9)


def write_wall_recording(path: Path, encode_wall: int = 50, windows: int = 20, wall: bool = True) -> Path:
    """A pipeline thread that spends ``encode_wall`` of 100 wall samples a window in a tokenizer
    that releases the GIL (CPU windows see 10) and 50 in forward, and a helper thread that only
    sleeps. ``wall`` false: CPU windows only, as a recording older than format 1.5."""
    session, writer = Session(), RecordingWriter(str(path))
    writer.write([TARGET])
    for i in range(20):
        is_wall = wall and i % 2 == 1
        rows = [(1, "MainThread", ENCODE, encode_wall if is_wall else 10), (1, "MainThread", FORWARD, 50)]
        if is_wall:
            rows.append((2, "metrics", HELPER, 100))
        raw = RawSampleWindow(TARGET.started + i, TARGET.started + i + 1, 100.0, 100, tuple(rows), idle=is_wall)
        writer.write(session.intern(raw))
    writer.close()
    return path
