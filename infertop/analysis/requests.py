"""Requests named by the application: stage spans with a request id
(``infertop.stage(..., request=ID)``) grouped into requests, each from its first span's start
to its last one's end, with the time each stage took in it (report ``requests``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from infertop.analysis.shares import Latency, percentile
from infertop.model.events import StageSpan

SLOWEST_REQUESTS = 10


@dataclass(frozen=True)
class Request:
    id: str
    t_start: float
    t_end: float
    stages: tuple[tuple[str, float], ...]  # (stage, ms spent in its spans), largest first

    @property
    def duration_ms(self) -> float:
        return (self.t_end - self.t_start) * 1000.0


@dataclass(frozen=True)
class RequestSummary:
    count: int
    latency_ms: Latency
    slowest: tuple[Request, ...]
    #: each stage's share of the requests' summed stage time: all requests, the slowest
    stage_shares: tuple[tuple[str, float, float], ...]


def requests_of(spans: Iterable[StageSpan]) -> list[Request]:
    by_id: dict[str, list[StageSpan]] = {}
    for sp in spans:
        if sp.request is not None:
            by_id.setdefault(sp.request, []).append(sp)
    out = []
    for rid, group in by_id.items():
        ms: dict[str, float] = {}
        for sp in group:
            ms[sp.stage] = ms.get(sp.stage, 0.0) + (sp.t_end - sp.t_start) * 1000.0
        stages = tuple(sorted(ms.items(), key=lambda kv: (-kv[1], kv[0])))
        out.append(Request(rid, min(sp.t_start for sp in group), max(sp.t_end for sp in group), stages))
    return out


def summarize_requests(spans: Iterable[StageSpan]) -> RequestSummary | None:
    reqs = requests_of(spans)
    if not reqs:
        return None
    durations = sorted(r.duration_ms for r in reqs)
    slowest = tuple(sorted(reqs, key=lambda r: -r.duration_ms)[:SLOWEST_REQUESTS])

    def shares(rs: Iterable[Request]) -> dict[str, float]:
        acc: dict[str, float] = {}
        for r in rs:
            for st, ms in r.stages:
                acc[st] = acc.get(st, 0.0) + ms
        total = sum(acc.values())
        return {k: v / total for k, v in acc.items()} if total else {}

    every, slow = shares(reqs), shares(slowest)
    names = sorted(set(every) | set(slow), key=lambda k: -slow.get(k, 0.0))
    return RequestSummary(
        count=len(reqs),
        latency_ms=Latency(percentile(durations, 50), percentile(durations, 95), percentile(durations, 99)),
        slowest=slowest,
        stage_shares=tuple((k, every.get(k, 0.0), slow.get(k, 0.0)) for k in names),
    )
