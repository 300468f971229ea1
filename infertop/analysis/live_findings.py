"""Findings on a snapshot, for the live (and replay) UI: computed off the UI thread.

The ingest worker calls ``with_findings`` on every snapshot it builds, so findings appear and
clear as windows roll in, exactly as ``infertop report`` would rank them at that moment.
"""

from __future__ import annotations

from dataclasses import replace

from infertop.analysis.findings import evaluate
from infertop.analysis.session_findings import snapshot_input
from infertop.analysis.snapshot import Snapshot
from infertop.config import FindingThresholds


def with_findings(snap: Snapshot, thresholds: FindingThresholds | None = None) -> Snapshot:
    """``snap`` with its ranked findings (most severe first)."""
    return replace(snap, findings=tuple(evaluate(snapshot_input(snap), thresholds)))
