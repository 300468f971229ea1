"""Reading a recording record by record, for work whose memory must not grow with the file.

``read_recording`` (reader.py) holds every event; ``RecordingStream`` yields them one record at
a time from the open file and stops at the same damage, with the same warning, so exports of
hour-long recordings run in bounded memory.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import msgpack

from infertop.errors import BadInputFile
from infertop.model.events import Event
from infertop.record.format import HEADER, MAGIC, MAJOR, MAX_RECORD, RECORD, decode_event


class RecordingStream:
    """Iterate a recording's events; ``warning`` is set once a damaged record stops it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.warning: str | None = None
        try:
            with open(path, "rb") as fh:
                head = fh.read(HEADER.size)
        except FileNotFoundError:
            raise BadInputFile(f"{path}: no such file") from None
        except IsADirectoryError:
            raise BadInputFile(f"{path} is a directory, not a recording") from None
        except OSError as exc:
            raise BadInputFile(f"cannot read {path}: {exc.strerror}") from None
        if len(head) < HEADER.size or not head.startswith(MAGIC):
            raise BadInputFile(
                f"{path} is not an infertop recording",
                "recordings are made by `infertop record`; torch.profiler traces are "
                "read as they are (TRACE.json or TRACE.json.gz)",
            )
        _, major, minor = HEADER.unpack_from(head)
        if major > MAJOR:
            raise BadInputFile(
                f"{path} is recording format {major}.{minor}, newer than this infertop reads ({MAJOR}.x)",
                "upgrade infertop: pip install -U infertop",
            )
        self.version = (major, minor)

    def batches(self) -> Iterator[list[Event]]:
        """One list of events per record, in file order."""
        self.warning = None
        with open(self.path, "rb") as fh:
            fh.seek(HEADER.size)
            pos = HEADER.size
            while True:
                head = fh.read(RECORD.size)
                if not head:
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
                        except Exception as exc:  # malformed payload that passed the CRC
                            problem = f"a malformed record ({type(exc).__name__})"
                        else:
                            yield [e for e in events if e is not None]
                            pos += RECORD.size + length
                            continue
                self.warning = f"{self.path}: {problem} at byte {pos}; read what came before it"
                return

    def __iter__(self) -> Iterator[Event]:
        for batch in self.batches():
            yield from batch
