"""Messages the ingest worker posts to the app (from its thread; Textual queues them safely)."""

from __future__ import annotations

from textual.message import Message


class SnapshotReady(Message):
    """A new snapshot is waiting in the worker; the app takes only the newest one."""


class IngestError(Message):
    """The worker hit an error (``text``), or recovered from one (``text`` is None)."""

    def __init__(self, text: str | None) -> None:
        super().__init__()
        self.text = text


class RecordingChanged(Message):
    """A recording started or stopped (or failed to start: ``error``)."""

    def __init__(
        self, path: str | None, recording: bool, size: int = 0, error: str | None = None
    ) -> None:
        super().__init__()
        self.path = path
        self.recording = recording
        self.size = size
        self.error = error
