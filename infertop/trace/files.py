"""Which paths are traces, and a trace file's bytes, read and gunzipped, optionally on a thread
of their own.

Reading a file and inflating gzip both release the GIL, so ``Prefetch`` does them on a second
core while the caller imports the analysis modules (numpy and the rest: about as long as
the gunzip of a 25 MB trace). This module imports nothing heavy on purpose.
"""

from __future__ import annotations

import gzip
import os
import re
import threading
import zlib

from infertop.errors import BadInputFile

TRACE_SUFFIXES = (".json", ".json.gz")


def is_trace_path(path: str) -> bool:
    """A torch.profiler trace file, or a directory of them (one per rank), by its name."""
    return path.endswith(TRACE_SUFFIXES) or os.path.isdir(path)


def _natural(path: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", os.path.basename(path))]


def trace_files(path: str) -> list[str]:
    """``path`` itself, or the traces of a directory (one per rank) in natural order (rank2
    before rank10); BadInputFile for a directory without any."""
    if not os.path.isdir(path):
        return [path]
    files = sorted(
        (os.path.join(path, f) for f in os.listdir(path) if f.endswith(TRACE_SUFFIXES)),
        key=_natural,
    )
    if not files:
        raise BadInputFile(f"{path} holds no .json or .json.gz traces")
    return files


def trace_bytes(path: str) -> bytes:
    """The trace's JSON text as bytes (gunzipped when it is gzip); BadInputFile if unreadable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise BadInputFile(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInputFile(f"{path} is a directory; pass one trace file") from None
    except OSError as exc:
        raise BadInputFile(f"cannot read {path}: {exc.strerror}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadInputFile(f"{path}: damaged gzip data ({exc})") from None
    return raw


class Prefetch:
    """``trace_bytes(path)`` started on a daemon thread; ``take()`` waits for it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._data: bytes | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="infertop-read", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._data = trace_bytes(self.path)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by take()
            self._error = exc

    def take(self) -> bytes:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._data is not None
        return self._data
