"""The collector protocol: start, poll for new events, stop. Health is reported as events."""

from __future__ import annotations

from typing import Protocol

from infertop.model.events import Event


class Collector(Protocol):
    name: str

    def start(self) -> None:
        """Begin collecting; must not block for long."""

    def poll(self) -> list[Event]:
        """Events gathered since the last poll (never blocks, never raises)."""

    def stop(self) -> None:
        """Stop and release everything; safe to call twice."""
