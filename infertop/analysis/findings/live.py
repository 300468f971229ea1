"""Findings on a snapshot, for the live (and replay) UI: computed off the UI thread.

The ingest worker calls ``with_findings`` on every snapshot it builds, so findings appear and
clear as windows roll in, exactly as ``infertop report`` would rank them at that moment.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from infertop.analysis.cpu_contention import waited_by_pid
from infertop.analysis.findings.rules import evaluate, ranked
from infertop.analysis.findings.session import snapshot_input
from infertop.analysis.processes.shares import roles
from infertop.analysis.session import Session
from infertop.analysis.snapshot import Snapshot
from infertop.analysis.stragglers import comparison, straggler_findings
from infertop.config import FindingThresholds
from infertop.model.findings import Finding


def with_findings(
    snap: Snapshot, thresholds: FindingThresholds | None = None, extra: Sequence[Finding] = ()
) -> Snapshot:
    """``snap`` with its ranked findings (most severe first). In the view of one process
    (key w) they are that process's and say so; ``extra``: findings only a view of every
    process can raise (a straggler)."""
    found = evaluate(snapshot_input(snap), thresholds)
    if snap.process is not None:
        found = [f if f.pid is not None else replace(f, pid=snap.process) for f in found]
    return replace(snap, findings=tuple(ranked([*found, *extra])))


SPANS_EVERY_S = 2.0


class StragglerCheck:
    """The straggler rule on a many-process session, again only when op windows or stage
    spans came."""

    def __init__(self) -> None:
        self._key: tuple[int, int, int] | None = None
        self._at = 0.0
        self._found: list[Finding] = []

    def findings(
        self, session: Session, t: float | None, thresholds: FindingThresholds | None = None
    ) -> list[Finding]:
        if len(session.processes) < 2:
            return []
        n = len(session.op_windows_between(None, t))
        key = (id(session), n + session.op_windows_folded, len(session.spans))
        # spans come with every window: compare again at most every SPANS_EVERY_S for them
        due = key[:2] != self._key[:2] if self._key else True
        due = due or (key != self._key and time.monotonic() - self._at >= SPANS_EVERY_S)
        if due:
            self._key, self._at = key, time.monotonic()
            names = {pid: f"{role} (pid {pid})" for pid, role in roles(session).items()}
            steps, unit = comparison(session, t)
            waited = waited_by_pid(session.cpu_contention(t))
            self._found = straggler_findings(steps, names, thresholds, unit, waited)
        return self._found
