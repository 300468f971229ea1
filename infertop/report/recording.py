"""A recording's report: replayed to its end, one snapshot, the report document and (for a
recording of several processes) its processes section. ``report FILE``, ``report DIR`` of
ranks (imported in memory) and ``diff`` all take this one road."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infertop.analysis.fold import FlameShape
from infertop.analysis.snapshot import Snapshot, build_snapshot
from infertop.config import Config
from infertop.model.events import INCIDENT
from infertop.record.reader import Recording
from infertop.report.build import build_record
from infertop.report.processes import add_processes
from infertop.report.records import Incident, Report, as_json
from infertop.sources import ReplaySource


@dataclass(frozen=True)
class RecordingReport:
    record: Report
    source: ReplaySource  # replayed to its end: its session is the whole recording
    snapshot: Snapshot

    @property
    def report(self) -> dict[str, Any]:
        """The document as JSON values (``report --format json``; the text renderers')."""
        return as_json(self.record)


def recording_report(
    rec: Recording, cfg: Config, kind: str = "recording", path: str | None = None,
    processes: bool = True,
) -> RecordingReport:  # fmt: skip
    """The report of ``rec`` (``kind``: the report's ``source.kind``; ``path``: its
    ``source.path``, the recording's own by default). ``processes``: add the processes section
    and its findings (``diff`` compares the whole-session findings only)."""
    src = ReplaySource(rec, cfg)
    shape = FlameShape(patterns=cfg.fold_frames)  # top frames with the config's plumbing folded
    snap = build_snapshot(
        src.session, t=src.t, notes=src.notes, shape=shape, tails=dict(cfg.slow_ms)
    )
    rep = build_record(snap, kind, path if path is not None else rec.path, cfg.findings)
    if processes:
        add_processes(rep, src.session, src.t, cfg.findings)  # None: one process
    marks = [m for m in src.session.markers if m.text.startswith(INCIDENT)]
    if marks:  # an incident of `watch` (docs/watch.md): its trigger's moment and reason
        rep.incidents = [
            Incident(m.t, round(m.t - src.t0, 3), m.text[len(INCIDENT):], m.extra.get("trigger"))
            for m in marks
        ]
    return RecordingReport(rep, src, snap)
