"""Reading a recording record by record, for work whose memory must not grow with the file.

``read_recording`` (reader.py) holds every event; ``RecordingStream`` yields them one record at
a time from the open file and stops at the same damage, with the same warning, so exports of
hour-long recordings run in bounded memory.
"""

from __future__ import annotations

from collections.abc import Iterator

from infertop.model.events import Event
from infertop.record.format import HEADER
from infertop.record.reader import Records, check_header, read_head


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
            records = Records(fh, self.path)
            yield from records
            self.warning = records.warning

    def __iter__(self) -> Iterator[Event]:
        for batch in self.batches():
            yield from batch
