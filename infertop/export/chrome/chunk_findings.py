"""Findings over a recording, minute by minute, in bounded memory.

The export streams a recording once; the events of each ``CHUNK_S`` stretch go into a fresh
session (sharing frame, stack and thread definitions) and, when the stretch ends, the same
rules as ``infertop report`` run on it. What fired is reported with the stretch it fired in.
"""

from __future__ import annotations

from dataclasses import dataclass

from infertop.analysis.findings import Finding, evaluate
from infertop.analysis.findings.session import snapshot_input
from infertop.analysis.session import Session
from infertop.analysis.snapshot import build_snapshot
from infertop.analysis.stages import StageClassifier
from infertop.config import FindingThresholds
from infertop.model.events import Event, StageRules, TargetInfo, ThreadDef
from infertop.model.symbols import SymbolTable
from infertop.sources import event_time

CHUNK_S = 60.0


@dataclass(frozen=True)
class ChunkFindings:
    t_start: float
    t_end: float
    findings: tuple[Finding, ...]


class FindingsByChunk:
    def __init__(
        self,
        classifier: StageClassifier,
        thresholds: FindingThresholds | None,
        chunk_s: float = CHUNK_S,
    ) -> None:
        self.classifier, self.thresholds, self.chunk_s = classifier, thresholds, chunk_s
        self.symbols = SymbolTable()
        self.threads: dict[int, str] = {}
        self.target = TargetInfo(pid=None)
        self.session: Session | None = None
        self.t_start: float | None = None
        self.t_last: float | None = None

    def _fresh(self) -> Session:
        return Session(
            classifier=self.classifier,
            target=self.target,
            symbols=self.symbols,
            threads=self.threads,
        )

    def add(self, ev: Event) -> ChunkFindings | None:
        """Feed one event; returns the findings of a stretch that this event closed."""
        done = None
        t = event_time(ev)
        if t is not None:
            if self.t_start is None:
                self.t_start = t
            elif t >= self.t_start + self.chunk_s and self.session is not None:
                done = self.flush()
                self.t_start = t
            self.t_last = t if self.t_last is None else max(self.t_last, t)
        if self.session is None:
            self.session = self._fresh()
        if isinstance(ev, StageRules):
            return done
        self.session.apply(ev)
        match ev:
            case TargetInfo():
                self.target = self.session.target
            case ThreadDef():
                self.threads = self.session.threads
        return done

    def flush(self) -> ChunkFindings | None:
        s = self.session
        self.session = None
        if s is None or self.t_start is None or (not s.windows and not s.op_windows):
            return None
        snap = build_snapshot(s)
        found = evaluate(snapshot_input(snap), self.thresholds)
        return ChunkFindings(
            self.t_start, max(self.t_last or self.t_start, self.t_start), tuple(found)
        )
