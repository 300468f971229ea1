"""Reading a recording record by record, for work whose memory must not grow with the file.

``read_recording`` (reader.py) holds every event; ``RecordingStream`` yields them one record at
a time from the open file and stops at the same damage, with the same warning, so exports of
hour-long recordings run in bounded memory.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import msgpack

from infertop.model.events import Event
from infertop.record.format import HEADER, MAX_RECORD, RECORD, decode_event
from infertop.record.reader import check_header, read_head
from infertop.record.references import References


class RecordingStream:
    """Iterate a recording's events; ``warning`` is set once a damaged record stops it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.warning: str | None = None
        major, minor = check_header(read_head(path, HEADER.size), path)
        self.version = (major, minor)

    def batches(self) -> Iterator[list[Event]]:
        """One list of events per record, in file order."""
        self.warning = None
        with open(self.path, "rb") as fh:
            fh.seek(HEADER.size)
            pos = HEADER.size
            refs = References()
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
                            refs.check(events)
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
