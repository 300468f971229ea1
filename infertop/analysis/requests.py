"""Requests: stage spans with a request id grouped into requests, each from its first span's
start to its last one's end, with the time each stage took in it (report ``requests``). The
ids come from the application (``infertop.stage(..., request=ID)``) or from the agent, which
names each request of an ASGI app it times by its method, path and a number
(``POST /embed #17``): those have a route, the path with its ids taken out (``route_of``).

An agent-named request holds no other stage's spans: the calls it caused (a tokenizer call on
a thread pool, a worker process's batch) carry no id. They are joined to the requests **by
time** (``join_by_time``): for each stage, a call inside a request's interval goes to the
request without one that became ready for it last (the one that arrived, or finished its
earlier stage, just before the call began: a call the agent missed shifts no other request's),
and a stage with fewer calls than there are requests (a batch: one ``predict`` for eight
requests) is shared: each request takes the first of its calls after its earlier stages. What
a joined request spent outside its calls is ``queue`` where it waited for a batch (between its
``preprocess`` and its ``forward``, and inside the timed batch collection before them on the
forward's thread: LitServe's ``collate_requests``), and the rest ``ipc`` where its calls
ran in another process (the hop there and back, and the API process's own work) or ``other``
in its own. Joined by time, a breakdown is approximate where requests overlap (docs/report.md).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

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
    tid: int = 0  # the thread of its first span

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
    #: how the requests' stages were found: "id" (their own spans), "time" (join_by_time) or
    #: "none" (requests with no stage inside them)
    joined: str = "none"
    #: (stage, p50 ms, p99 ms) over the requests of the most common path, in pipeline order
    breakdown_ms: tuple[tuple[str, float, float], ...] = ()


def _latency(durations: list[float]) -> Latency:
    durations = sorted(durations)
    return Latency(percentile(durations, 50), percentile(durations, 95), percentile(durations, 99))


def requests_of(spans: Iterable[StageSpan], process_of: Mapping[int, int] | None = None) -> list[Request]:
    """The requests among ``spans``. An application's id is one request wherever its spans ran
    (an id it carries across processes); an agent-named one (``POST /embed #17``) is numbered
    per process, so two API processes' "#17" are two requests (``process_of``: tid -> pid)."""
    owner = process_of or {}
    by_id: dict[tuple[str, int], list[StageSpan]] = {}
    for sp in spans:
        if sp.request is not None:
            where = owner.get(sp.tid, 0) if _NAMED.match(sp.request) else 0
            by_id.setdefault((sp.request, where), []).append(sp)
    out = []
    for (rid, _), group in by_id.items():
        ms: dict[str, float] = {}
        for sp in group:
            ms[sp.stage] = ms.get(sp.stage, 0.0) + (sp.t_end - sp.t_start) * 1000.0
        stages = tuple(sorted(ms.items(), key=lambda kv: (-kv[1], kv[0])))
        first = min(group, key=lambda sp: sp.t_start)
        out.append(Request(rid, first.t_start, max(sp.t_end for sp in group), stages, first.tid))
    return out


def by_route(reqs: Iterable[Request]) -> tuple[RouteLatency, ...]:
    groups: dict[str, list[float]] = {}
    for r in reqs:
        route = route_of(r.id)
        if route is not None:
            groups.setdefault(route, []).append(r.duration_ms)
    rows = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:MAX_ROUTES]
    return tuple(RouteLatency(route, len(ms), _latency(ms)) for route, ms in rows)


#: the stages a request's calls are joined in, in pipeline order (``request`` itself is not);
#: ``queue`` is of the time between them (``_queue_ms``)
JOINED_STAGES = ("preprocess", "forward", "postprocess", "serialize")
BREAKDOWN_ORDER = ("preprocess", "queue", "forward", "postprocess", "serialize", "ipc", "other")
#: a stage with fewer calls than this share of the requests is batched: its calls are shared
BATCHED_BELOW = 0.8
#: a call is looked for among this many requests that began before it (those open at once)
MAX_OPEN = 64


def join_by_time(
    reqs: list[Request], spans: Iterable[StageSpan], process_of: Mapping[int, int] | None = None
) -> list[Request]:
    """``reqs`` (agent-named, with no stage of their own) with the calls inside them (module
    docstring); a request no call falls inside is left as it was."""
    owner = process_of or {}
    by_stage: dict[str, list[StageSpan]] = {}
    waits: dict[int, list[StageSpan]] = {}  # tid -> its queue calls (a batch's collection)
    for sp in spans:
        if sp.request is None and sp.stage in JOINED_STAGES:
            by_stage.setdefault(sp.stage, []).append(sp)
        elif sp.request is None and sp.stage == "queue":
            waits.setdefault(sp.tid, []).append(sp)
    if not by_stage or not reqs:
        return reqs
    queues = {tid: _Waits(w) for tid, w in waits.items()}
    # where a request's own thread (a sync WSGI worker's) or its own process (a thread pool's
    # tokenizer beside an ASGI loop) made calls of a stage, only those can be its: a worker
    # beside it serving other requests at the same time is not its pipeline; where neither
    # did (an API process whose model runs in a worker), the calls anywhere
    threads_with = {st: {sp.tid for sp in calls} for st, calls in by_stage.items()}
    procs_with = {st: {owner.get(t) for t in tids} - {None} for st, tids in threads_with.items()}

    def may_take(r: Request, sp: StageSpan) -> bool:
        if r.tid in threads_with[sp.stage]:
            return sp.tid == r.tid
        here = owner.get(r.tid)
        if here is not None and here in procs_with[sp.stage]:
            return owner.get(sp.tid) == here
        return True

    order = sorted(range(len(reqs)), key=lambda i: reqs[i].t_start)
    starts_in_order = [reqs[i].t_start for i in order]
    got: list[dict[str, StageSpan]] = [{} for _ in reqs]

    def ready(i: int) -> float:  # a request's next stage starts after its earlier ones ended
        return max((sp.t_end for sp in got[i].values()), default=reqs[i].t_start)

    for stage in JOINED_STAGES:
        calls = sorted(by_stage.get(stage, ()), key=lambda sp: sp.t_start)
        if not calls:
            continue
        if len(calls) < BATCHED_BELOW * len(reqs):
            # a batch: each request takes the first call after its earlier stages
            starts = [sp.t_start for sp in calls]
            for i in order:
                r = reqs[i]
                j = bisect.bisect_left(starts, ready(i) - 1e-6)
                while j < len(calls) and calls[j].t_start <= r.t_end:
                    if calls[j].t_end <= r.t_end + 1e-6 and may_take(r, calls[j]):
                        got[i][stage] = calls[j]
                        break
                    j += 1
            continue
        # one call a request: each call goes to the request that became ready for it last
        # (the one that arrived just before it), so that a call missed (the agent in one
        # process started later) shifts no other request's
        for c in calls:
            k = bisect.bisect_right(starts_in_order, c.t_start + 1e-6)
            best, best_ready = None, -1.0
            for i in (order[x] for x in range(k - 1, max(-1, k - 1 - MAX_OPEN), -1)):
                r = reqs[i]
                if stage in got[i] or r.t_end + 1e-6 < c.t_end or not may_take(r, c):
                    continue
                at = ready(i)
                # ready alike (a batch's requests after its predict): the first to arrive
                if at <= c.t_start + 1e-6 and at >= best_ready:
                    best, best_ready = i, at
            if best is not None:
                got[best][stage] = c
    out = []
    for r, mine in zip(reqs, got):
        if not mine:
            out.append(r)
            continue
        ms = {st: (sp.t_end - sp.t_start) * 1000.0 for st, sp in mine.items()}
        queue = _queue_ms(r, mine, queues)
        if queue > 0:
            ms["queue"] = queue
        here = owner.get(r.tid)
        elsewhere = here is not None and any(
            owner.get(sp.tid) not in (None, here) for sp in mine.values()
        )
        rest = r.duration_ms - sum(ms.values())
        if rest > 0:
            ms["ipc" if elsewhere else "other"] = rest
        stages = tuple(sorted(ms.items(), key=lambda kv: (-kv[1], kv[0])))
        out.append(replace(r, stages=stages))
    return out


class _Waits:
    """One thread's queue calls, by their ends."""

    def __init__(self, calls: list[StageSpan]) -> None:
        self.calls = sorted(calls, key=lambda sp: sp.t_end)
        self.ends = [sp.t_end for sp in self.calls]

    def last_before(self, t: float) -> StageSpan | None:
        i = bisect.bisect_right(self.ends, t + 1e-6) - 1
        return self.calls[i] if i >= 0 else None


def _queue_ms(r: Request, mine: dict[str, StageSpan], queues: dict[int, _Waits]) -> float:
    """A joined request's wait for its batch, in ms: from its ``preprocess`` to its ``forward``
    (the batch's other requests prepared), and where a queue call (a framework's batch
    collection: LitServe's ``collate_requests``) ended last before its first call on the
    forward's thread, from when the request was ready for that call (it arrived, or its calls
    before it ended) to its first call there (the collection, then the batch's other requests
    decoded before its own). Overlaps count once."""
    pre, fwd = mine.get("preprocess"), mine.get("forward")
    spans: list[tuple[float, float]] = []
    if pre is not None and fwd is not None and fwd.t_start > pre.t_end:
        spans.append((pre.t_end, fwd.t_start))
    anchor = fwd or min(mine.values(), key=lambda sp: sp.t_start)
    first = min((sp.t_start for sp in mine.values() if sp.tid == anchor.tid), default=anchor.t_start)
    waits = queues.get(anchor.tid)
    q = waits.last_before(first) if waits is not None else None
    if q is not None and q.t_end > r.t_start:
        ready = max([r.t_start, *(sp.t_end for sp in mine.values() if sp.t_end <= q.t_end)])
        spans.append((max(q.t_start, ready), first))  # and until its first call
    spans = sorted((a, b) for a, b in spans if b > a)
    total, reach = 0.0, float("-inf")
    for a, b in spans:
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total * 1000.0


def own_ids_first(reqs: list[Request]) -> list[Request]:
    """Where the application or its engine names its requests (a vLLM server's request ids,
    each with its parts), the agent's names for the same requests (an ASGI app's ``POST
    /v1/completions #17``, whose only span is ``request``) would count each twice: those go."""
    def named_only(r: Request) -> bool:
        return bool(_NAMED.match(r.id)) and all(st == "request" for st, _ in r.stages)

    if not any(not _NAMED.match(r.id) and len(r.stages) > 1 for r in reqs):
        return reqs
    return [r for r in reqs if not named_only(r)]


def summarize_requests(
    spans: Iterable[StageSpan], duration_s: float | None = None,
    process_of: Mapping[int, int] | None = None,
) -> RequestSummary | None:
    """The requests among ``spans``; ``duration_s``: the session's, for ``per_s``;
    ``process_of`` (tid -> pid) tells processes apart."""
    spans = list(spans)
    reqs = own_ids_first(requests_of(spans, process_of))
    if not reqs:
        return None
    joined = "none"
    if any(len(r.stages) > 1 or (r.stages and r.stages[0][0] != "request") for r in reqs):
        joined = "id"  # the application's ids: each request holds its own stages' spans
    elif any(_NAMED.match(r.id) for r in reqs):
        reqs = join_by_time(reqs, spans, process_of)
        if any(len(r.stages) > 1 for r in reqs):
            joined = "time"
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
        joined=joined,
        breakdown_ms=_breakdown(reqs) if joined != "none" else (),
    )


def _breakdown(reqs: Iterable[Request]) -> tuple[tuple[str, float, float], ...]:
    """Each stage's p50/p99 ms over the requests that took the most common path (the same set
    of stages): a request joined only in part (at a recording's start, before every process's
    agent timed anything) would add an ``ipc`` or ``other`` that is most of its time."""
    paths: dict[frozenset[str], list[Request]] = {}
    for r in reqs:
        paths.setdefault(frozenset(st for st, _ in r.stages), []).append(r)
    typical = max(paths.values(), key=len, default=[])
    per: dict[str, list[float]] = {}
    for r in typical:
        for st, ms in r.stages:
            if st != "request":
                per.setdefault(st, []).append(ms)
    order = BREAKDOWN_ORDER
    names = sorted(per, key=lambda k: (order.index(k) if k in order else len(order), k))
    out = []
    for st in names:
        durations = sorted(per[st])
        out.append((st, percentile(durations, 50), percentile(durations, 99)))
    return tuple(out)
