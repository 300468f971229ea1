"""Reading recordings: every event up to the end or to the first damaged record."""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import msgpack

from infertop.errors import BadInputFile
from infertop.model.events import Event, TargetInfo
from infertop.record.format import HEADER, MAGIC, MAJOR, MAX_RECORD, RECORD, decode_event
from infertop.record.references import References


@dataclass
class Recording:
    path: str
    version: tuple[int, int]
    events: list[Event] = field(default_factory=list)
    warning: str | None = None  # set when the file was damaged or cut short


def read_head(path: str, size: int = -1) -> bytes:
    """The first ``size`` bytes of a recording (all of it by default), or one clear error."""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except FileNotFoundError:
        raise BadInputFile(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInputFile(f"{path} is a directory, not a recording") from None
    except OSError as exc:
        raise BadInputFile(f"cannot read {path}: {exc.strerror}") from None


def check_header(data: bytes, path: str) -> tuple[int, int]:
    """The format version a recording starts with; refuses other files and newer majors."""
    if len(data) < HEADER.size or not data.startswith(MAGIC):
        raise BadInputFile(
            f"{path} is not an infertop recording",
            "recordings are made by `infertop record` or `attach --record`; "
            "torch.profiler traces are read as they are (TRACE.json or TRACE.json.gz)",
        )
    _, major, minor = HEADER.unpack_from(data)
    if major > MAJOR:
        raise BadInputFile(
            f"{path} is recording format {major}.{minor}, newer than this infertop reads ({MAJOR}.x)",
            "upgrade infertop: pip install -U infertop",
        )
    return major, minor


def read_recording(path: str) -> Recording:
    return parse_recording(read_head(path), path)


def parse_recording(data: bytes, path: str = "<bytes>") -> Recording:
    major, minor = check_header(data, path)
    rec = Recording(path, (major, minor))
    fh = io.BytesIO(data)
    fh.seek(HEADER.size)
    records = Records(fh, path)
    for events in records:
        rec.events.extend(events)
    rec.warning = records.warning
    return rec


class Records:
    """The records of an open recording from its position (just past the header) on, one list
    of events each, in file order, every id checked against what came before. The first
    damaged, malformed or cut record ends them, and ``warning`` says what and where: the one
    loop of every reader (``read_recording`` holds the events, ``RecordingStream`` does not).

    Damage before the target (event 1, in the first record every writer writes), or nothing
    at all after the header, leaves nothing to read: no process, no time, no stage rules. That
    is an unreadable recording, ``BadInputFile`` (exit 5), not an empty session reported as
    ``pid None``."""

    def __init__(self, fh: BinaryIO, path: str) -> None:
        self.fh = fh
        self.path = path
        self.warning: str | None = None

    def __iter__(self) -> Iterator[list[Event]]:
        fh, pos, refs = self.fh, HEADER.size, References()
        target = False  # a TargetInfo was read: the damage, if any, comes after the session began
        while True:
            head = fh.read(RECORD.size)
            if not head:
                if pos == HEADER.size:  # a header and nothing else: a file cut right after it
                    raise BadInputFile(
                        f"{self.path}: unreadable recording: nothing after its header"
                    )
                return
            problem = None
            if len(head) < RECORD.size:
                problem = "cut short inside a record header"
            else:
                length, crc = RECORD.unpack(head)
                payload = fh.read(length) if length <= MAX_RECORD else b""
                if length > MAX_RECORD or len(payload) < length:
                    problem = "cut short inside a record"
                elif zlib.crc32(payload) != crc:
                    problem = "a damaged record (checksum mismatch)"
                else:
                    try:
                        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
                        if not isinstance(raw, list):
                            raise ValueError("record is not a list")
                        events = [decode_event(e) for e in raw]
                        refs.check(events)
                    except Exception as exc:  # malformed payload that passed the CRC
                        problem = f"a malformed record ({type(exc).__name__})"
                    else:
                        kept = [e for e in events if e is not None]
                        target = target or any(isinstance(e, TargetInfo) for e in kept)
                        yield kept
                        pos += RECORD.size + length
                        continue
            if not target:
                raise BadInputFile(
                    f"{self.path}: unreadable recording: {problem} at byte {pos}, before the "
                    "record that names its target (nothing of the session to read)"
                )
            self.warning = f"{self.path}: {problem} at byte {pos}; read what came before it"
            return
