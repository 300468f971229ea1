"""Append-only recording writer: each ``write`` is one CRC-checked record, flushed at once."""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence

import msgpack

from infertop.errors import UsageError
from infertop.model.events import Event
from infertop.record.format import HEADER, MAGIC, MAJOR, MINOR, RECORD, encode_event


class RecordingWriter:
    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the command line
        except OSError as exc:
            raise UsageError(f"cannot write recording {path}: {exc.strerror}") from None
        self.bytes_written = 0
        self.failed: str | None = None
        try:
            self._write(HEADER.pack(MAGIC, MAJOR, MINOR))
        except OSError as exc:  # a full disk from the start
            os.close(self._fd)
            self._fd = -1
            raise UsageError(f"cannot write recording {path}: {exc.strerror or exc}") from None

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self.bytes_written += len(data)

    def write(self, events: Sequence[Event]) -> None:
        """Append events as one record. A write error (disk full) stops recording, keeps the file."""
        if not events or self.failed or self._fd < 0:
            return
        payload = msgpack.packb([encode_event(e) for e in events], use_bin_type=True)
        try:
            self._write(RECORD.pack(len(payload), zlib.crc32(payload)) + payload)
        except OSError as exc:
            self.failed = f"recording stopped: {exc.strerror or exc}"

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = -1
