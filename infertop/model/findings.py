"""A finding: one bottleneck rule that fired, with its evidence, where and a fix (docs/findings.md).

The record lives in the model so that what carries findings (snapshots, straggler checks, the UI)
need not import the rules that make them (``infertop.analysis.findings``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # high | medium | low
    title: str
    evidence: dict[str, Any]
    where: tuple[str, ...]
    hint: str
    #: the process it is about (a rank, a process of a merged recording); None: the whole
    #: session (every process merged, as for a recording of one process)
    pid: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "title": self.title,
            "evidence": self.evidence,
            "where": list(self.where),
            "hint": self.hint,
            "pid": self.pid,
        }
