"""The incident trigger in the live UI: the auto trigger of ``infertop watch`` on the session's
stage calls, and the same ring of the last seconds, so that an incident the UI saw can be saved
as watch would have written it (docs/ui.md, docs/watch.md). No Textual here: the ingest worker
owns it, as it owns the source.

When the trigger fires, the moment goes on the session's timeline (an ``incident: REASON``
marker, in the recording too when one is being made) and the status line offers to save it
(key ``x``); saved, the file holds the ``before`` seconds before the moment and the ``after``
seconds after it, written as they come.
"""

from __future__ import annotations

import time

from infertop.analysis.triggers import Firing, Triggers
from infertop.model.events import Event, Marker
from infertop.record.incident import EventRing, Incident, incident_marker, incident_path
from infertop.sources import LiveSource

BEFORE_S, AFTER_S = 30.0, 10.0  # watch's defaults
RING_SLACK_S = 5.0


class LiveIncidents:
    """Feeds the trigger and the ring from ``source``'s batches (a listener); ``check`` each
    pump; ``save`` the last incident; ``note`` is the status line's text."""

    def __init__(self, source: LiveSource, before: float = BEFORE_S, after: float = AFTER_S) -> None:
        self.source = source
        self.before, self.after = before, after
        self.triggers = Triggers(auto=True)
        self.ring = EventRing(before + after + RING_SLACK_S)
        self.ring.add(source.definitions(), time.time())
        self.last: tuple[Firing, Marker] | None = None
        self.writing: Incident | None = None
        self.saved: list[str] = []
        self.saved_for: float | None = None  # the firing time of the last incident saved
        self.error: str | None = None
        source.listeners.append(self._batch)

    def _batch(self, batch: list[Event]) -> None:
        self.ring.add(batch, time.time())
        self.triggers.add(batch)  # its spans, and its processes' CPU waits (CpuWait)
        if self.writing is not None:
            self.writing.write(batch)

    def check(self, now: float) -> None:
        """Close a saved incident that is complete; mark a new firing on the timeline."""
        if self.writing is not None and self.writing.due(now):
            self.saved.append(self.writing.close())
            self.writing = None
        firing = self.triggers.check(now)
        if firing is None:
            return
        marker = incident_marker(firing.t, firing.trigger, firing.reason, self.before, self.after)
        self.last = (firing, marker)
        self.source.session.apply(marker)
        if self.source.writer is not None:
            self.source.writer.write([marker])

    def save(self, out_dir: str = ".") -> str | None:
        """Start writing the last incident to ``out_dir`` (its ``after`` seconds still come);
        the path, or None when there is none (or it is being written)."""
        if self.last is None or self.writing is not None:
            return None
        firing, marker = self.last
        if self.saved_for == firing.t:
            return None  # saved already
        path = incident_path(out_dir, firing.t)
        try:
            self.writing = Incident(path, self.ring, marker, self.before, self.after)
        except Exception as exc:  # noqa: BLE001 - an unwritable directory: said, not raised
            self.error = f"cannot save the incident: {exc}"
            return None
        self.error = None
        self.saved_for = firing.t
        return path

    def close(self) -> None:
        """The session ends: an incident being written is finished with what it has."""
        if self.writing is not None:
            self.saved.append(self.writing.close())
            self.writing = None

    def note(self, now: float) -> str | None:
        """The status line's words about incidents; None when there is nothing to say."""
        if self.error:
            return self.error
        if self.writing is not None:
            left = max(0.0, self.writing.ends - now)
            return f"saving the incident → {self.writing.path} ({left:.0f} s more)"
        if self.last is None:
            return None
        firing, _ = self.last
        when = time.strftime("%H:%M:%S", time.localtime(firing.t))
        if self.saved_for == firing.t and self.saved:
            return f"incident {when} saved → {self.saved[-1]}"
        return f"incident {when}: {firing.reason} — x: save it"
