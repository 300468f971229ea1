"""The collector protocol: start, poll for new events, stop. Health is reported as events."""

from __future__ import annotations

import queue
from collections.abc import Sequence
from typing import Protocol, TypeVar


class Collector(Protocol):
    name: str

    def start(self) -> None:
        """Begin collecting; must not block for long."""

    def poll(self) -> Sequence[object]:
        """Events gathered since the last poll (never blocks, never raises): ``Event``s, or raw
        windows that ``Session.intern`` turns into events (py-spy's ``RawSampleWindow``, the
        agent's ``RawCallSamples``)."""

    def stop(self) -> None:
        """Stop and release everything; safe to call twice."""


T = TypeVar("T")


def drain(q: queue.SimpleQueue[T] | queue.Queue[T]) -> list[T]:
    """Everything waiting in a collector's event queue (or command queue), without blocking."""
    out: list[T] = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out
