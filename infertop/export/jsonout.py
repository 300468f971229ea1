"""Writing one big JSON document piece by piece: gzip when the name ends in ``.gz``, and the
output appears under its name only once it is complete (a failed export leaves no half file)."""

from __future__ import annotations

import gzip
import os
import tempfile
from typing import IO, Any

import msgspec

from infertop.errors import UsageError

_encode = msgspec.json.Encoder().encode
BUFFER = 1 << 20


def us(ns: int) -> int | float:
    """Integer nanoseconds as trace-event microseconds, exact to the nanosecond."""
    return ns // 1000 if ns % 1000 == 0 else round(ns / 1000, 3)


class JsonStream:
    """``open`` returns a binary file to write into; ``commit`` moves it into place."""

    def __init__(self, path: str, compress: bool | None = None) -> None:
        """``compress``: gzip or not; by default when ``path`` ends in ``.gz``."""
        self.path = path
        folder = os.path.dirname(os.path.abspath(path))
        try:
            fd, self._tmp = tempfile.mkstemp(prefix=".infertop-export-", dir=folder)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror}") from None
        raw = os.fdopen(fd, "wb", buffering=BUFFER)
        self._raw = raw
        self.fh: gzip.GzipFile | IO[bytes] = (
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0)
            if (path.endswith(".gz") if compress is None else compress)
            else raw
        )
        self.bytes_in = 0

    def write(self, data: bytes) -> None:
        self.bytes_in += len(data)
        try:
            self.fh.write(data)
        except OSError as exc:  # disk full: one message, and no half-written file left
            self.abort()
            raise UsageError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    def value(self, obj: Any) -> bytes:
        return _encode(obj)

    def commit(self) -> None:
        try:
            if self.fh is not self._raw:
                self.fh.close()
            self._raw.close()
            os.chmod(self._tmp, 0o644)
            os.replace(self._tmp, self.path)
        except OSError as exc:
            self.abort()
            raise UsageError(f"cannot write {self.path}: {exc.strerror}") from None

    def abort(self) -> None:
        """Close and remove the temporary file; safe to call again, and on a full disk."""
        for f in (self.fh, self._raw):  # gzip first: it writes its trailer into the raw file
            try:
                f.close()
            except (OSError, ValueError):  # disk full, or closed already
                pass
        try:
            os.unlink(self._tmp)
        except OSError:
            pass


class TraceEventWriter:
    """The Trace Event Format's object form: ``{"traceEvents": [...], ...}``, one event at a time."""

    def __init__(self, path: str) -> None:
        self.out = JsonStream(path)
        self.out.write(b'{"traceEvents":[\n')
        self.count = 0
        self._first = True

    def event(self, ev: dict[str, Any]) -> None:
        data = _encode(ev)
        if self._first:
            self._first = False
            self.out.write(data)
        else:
            self.out.write(b",\n" + data)
        self.count += 1

    def finish(self, other: dict[str, Any]) -> None:
        self.out.write(b'\n],"displayTimeUnit":"ms","otherData":' + _encode(other) + b"}\n")
        self.out.commit()

    def abort(self) -> None:
        self.out.abort()
