"""Requests: stage spans with a request id grouped into requests, each from its first span's
start to its last one's end, with the time each stage took in it (report ``requests``). The
ids come from the application (``infertop.stage(..., request=ID)``) or from the agent, which
names each request of an ASGI app it times by its method, path and a number
(``POST /embed #17``): those have a route, the path with its ids taken out (``route_of``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from infertop.analysis.shares import Latency, percentile
from infertop.model.events import StageSpan

SLOWEST_REQUESTS = 10
MAX_ROUTES = 20  # by_route keeps the busiest
#: an agent-named request: "METHOD PATH #N"
_NAMED = re.compile(r"^(?P<method>[A-Z]+) (?P<path>/\S*) #\d+$")
#: path segments that are ids, not routes: numbers, UUIDs, long hex
_ID_SEGMENT = re.compile(
    r"^(\d+|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-fA-F]{16,})$"
)


def route_of(request_id: str) -> str | None:
    """``POST /items/42 #17`` -> ``POST /items/{id}``; None for an application's own ids."""
    m = _NAMED.match(request_id)
    if m is None:
        return None
    path = m.group("path").split("?", 1)[0]
    parts = ["{id}" if _ID_SEGMENT.match(p) else p for p in path.split("/")]
    return f"{m.group('method')} {'/'.join(parts) or '/'}"


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
class RouteLatency:
    route: str
    count: int
    latency_ms: Latency


@dataclass(frozen=True)
class RequestSummary:
    count: int
    latency_ms: Latency
    slowest: tuple[Request, ...]
    #: each stage's share of the requests' summed stage time: all requests, the slowest
    stage_shares: tuple[tuple[str, float, float], ...]
    per_s: float | None = None  # requests per second of the session; None: duration unknown
    by_route: tuple[RouteLatency, ...] = ()  # the agent-named requests' routes, busiest first


def _latency(durations: list[float]) -> Latency:
    durations = sorted(durations)
    return Latency(percentile(durations, 50), percentile(durations, 95), percentile(durations, 99))


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


def by_route(reqs: Iterable[Request]) -> tuple[RouteLatency, ...]:
    groups: dict[str, list[float]] = {}
    for r in reqs:
        route = route_of(r.id)
        if route is not None:
            groups.setdefault(route, []).append(r.duration_ms)
    rows = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:MAX_ROUTES]
    return tuple(RouteLatency(route, len(ms), _latency(ms)) for route, ms in rows)


def summarize_requests(
    spans: Iterable[StageSpan], duration_s: float | None = None
) -> RequestSummary | None:
    """The requests among ``spans``; ``duration_s``: the session's, for ``per_s``."""
    reqs = requests_of(spans)
    if not reqs:
        return None
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
        latency_ms=_latency([r.duration_ms for r in reqs]),
        slowest=slowest,
        stage_shares=tuple((k, every.get(k, 0.0), slow.get(k, 0.0)) for k in names),
        per_s=len(reqs) / duration_s if duration_s else None,
        by_route=by_route(reqs),
    )
