"""The base of replay ``--base``: a recording's session, its flame's shares under the shape
and stage filter the UI shows, for the differential flame (``flame_diff``)."""

from __future__ import annotations

from infertop.analysis.flame_diff import BaseShares
from infertop.analysis.fold import FlameShape
from infertop.analysis.session import Session
from infertop.analysis.snapshot import build_snapshot


class BaseProfile:
    """Built once for each (shape, stage filter) asked for; the session is whole."""

    def __init__(self, session: Session, path: str) -> None:
        self.session = session
        self.path = path
        self._shares: dict[tuple[FlameShape, str | None], BaseShares] = {}

    def shares(self, shape: FlameShape, stage_filter: str | None) -> BaseShares:
        key = (shape, stage_filter)
        got = self._shares.get(key)
        if got is None:
            snap = build_snapshot(self.session, shape=shape, stage_filter=stage_filter)
            got = self._shares[key] = BaseShares(snap.flame)
        return got
