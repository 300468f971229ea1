"""Requests named by the application (``infertop.stage(..., request=ID)``): the annotation's
id reaches the agent's sink (and an older sink still gets the span), the wire and the file
carry it, and spans group into requests with their stage breakdown (analysis/requests.py)."""

from __future__ import annotations

import pytest

import infertop.annotate as annotate
from infertop.analysis.requests import join_by_time, requests_of, summarize_requests
from infertop.collect.agent.client import convert
from infertop.model.events import StageSpan
from infertop.record.format import decode_event, encode_event
from tests.support.request_spans import API, WORKER, batched_server, collecting_server


def test_the_request_id_reaches_the_sink_and_an_older_sink_still_gets_the_span() -> None:
    got: list[tuple] = []
    annotate.set_span_sink(lambda *a: got.append(a))
    try:
        with annotate.stage("preprocess", request=1234):
            pass
        with annotate.stage("serialize"):
            pass
    finally:
        annotate.set_span_sink(None)
    assert got[0][1] == "preprocess" and got[0][4] == "1234" and len(got[1]) == 4
    old: list[tuple] = []
    annotate.set_span_sink(lambda tid, name, t0, t1: old.append((name, t1 - t0)))
    try:
        with annotate.stage("forward", request="r-1"):  # an agent from before request ids
            pass
    finally:
        annotate.set_span_sink(None)
    assert [name for name, _ in old] == ["forward"]


def test_the_wire_and_the_file_carry_the_id() -> None:
    (a, b) = convert({"type": "spans", "spans": [[7, "forward", 10.0, 10.5, "r-1"], [7, "queue", 9.0, 10.0]]})
    assert a.request == "r-1" and b.request is None
    for sp in (a, b):
        assert decode_event(encode_event(sp)) == sp


def test_spans_group_into_requests_with_their_stages() -> None:
    spans = []
    for i in range(100):
        t = 100.0 + i
        slow = i == 99
        spans += [
            StageSpan(7, "queue", t, t + (0.200 if slow else 0.002), request=f"r{i}"),
            StageSpan(8, "forward", t + 0.2 if slow else t + 0.002, t + 0.21 if slow else t + 0.012, request=f"r{i}"),
        ]
    spans.append(StageSpan(7, "forward", 500.0, 500.1))  # no id: not a request
    assert len(requests_of(spans)) == 100
    s = summarize_requests(spans)
    assert s is not None and s.count == 100
    assert s.latency_ms.p50 == pytest.approx(12.0)
    top = s.slowest[0]
    assert (top.id, round(top.duration_ms, 3)) == ("r99", 210.0)
    assert top.stages[0] == ("queue", pytest.approx(200.0))
    # the slowest requests' time is mostly queue; all requests' mostly forward
    shares = {k: (a, b) for k, a, b in s.stage_shares}
    assert shares["queue"][1] > shares["forward"][1] and shares["forward"][0] > shares["queue"][0]
    assert summarize_requests(spans[-1:]) is None


def test_agent_named_requests_have_routes_with_their_ids_taken_out() -> None:
    from infertop.analysis.requests import route_of

    assert route_of("POST /embed #17") == "POST /embed"
    assert route_of("GET /items/42 #3") == "GET /items/{id}"
    assert route_of("GET /u/0f8fad5b-d9cb-469f-a165-70867728950e/x?q=1 #9") == "GET /u/{id}/x"
    assert route_of("GET / #1") == "GET /"
    assert route_of("req-17") is None and route_of("my id #3") is None  # the application's own
    spans = [
        StageSpan(1, "request", 10.0 + i, 10.0 + i + (0.010 if i % 2 else 0.002),
                  request=f"{'POST /embed' if i % 2 else 'GET /items/' + str(i)} #{i}")
        for i in range(10)
    ] + [StageSpan(1, "preprocess", 30.0, 30.5, request="mine")]  # fmt: skip
    req = summarize_requests(spans, duration_s=20.0)
    assert req is not None and req.count == 11 and req.per_s == 11 / 20.0
    routes = {r.route: r for r in req.by_route}
    assert set(routes) == {"POST /embed", "GET /items/{id}"}  # "mine" has no route
    assert routes["POST /embed"].count == 5 and abs(routes["POST /embed"].latency_ms.p50 - 10.0) < 1e-6
    assert abs(routes["GET /items/{id}"].latency_ms.p99 - 2.0) < 1e-6


# -- requests whose calls carry no id: joined by time --------------------------------------------


def test_a_request_is_followed_into_the_worker_by_time() -> None:
    s = summarize_requests(batched_server(), 4.0, {API: API, WORKER: WORKER})
    assert s.joined == "time" and s.count == 32
    br = {st: (p50, p99) for st, p50, p99 in s.breakdown_ms}
    assert list(br) == ["preprocess", "queue", "forward", "serialize", "ipc"]
    assert br["preprocess"][0] == pytest.approx(1.0, abs=0.01)
    assert br["forward"][0] == pytest.approx(20.0, abs=0.01)  # the batch, shared by its 8
    assert br["serialize"][0] == pytest.approx(0.5, abs=0.01)
    # the first request of a batch waits for the other 7 to be decoded: its queue is longest
    first = next(r for r in s.slowest if r.id.endswith("#1"))
    assert dict(first.stages)["queue"] == pytest.approx(9.0, abs=0.05)
    # what is left is the hop (two 0.3 ms transits) and the decode queue behind earlier requests
    assert 0.55 <= br["ipc"][0] <= 8.0


def test_a_batch_collection_is_the_request_s_queue_not_its_hop() -> None:
    s = summarize_requests(collecting_server(), 4.0, {API: API, WORKER: WORKER})
    assert s.joined == "time" and s.count == 32
    # request k of a batch waited in the collection from its arrival until the batch was in
    # (7.3 - k ms, its 0.3 ms transit in it), for the decodes before its own (k ms), and for
    # those after it (7 - k ms)
    reqs = join_by_time(requests_of(collecting_server()), collecting_server(), {API: API, WORKER: WORKER})
    for r in reqs:
        k = (int(r.id.split("#")[1]) - 1) % 8
        assert dict(r.stages)["queue"] == pytest.approx(14.3 - k), r
    br = {st: (p50, p99) for st, p50, p99 in s.breakdown_ms}
    assert list(br) == ["preprocess", "queue", "forward", "serialize", "ipc"]
    # what is left is the way back (0.3 ms) and the encodes of the batch's earlier requests
    assert 0.3 <= br["ipc"][0] <= 2.5 and br["ipc"][1] <= 3.9
    assert br["queue"][0] == pytest.approx(14.3 - 3.5)
    # a collection on another thread than the batch's forward is no wait of its requests
    spans = [sp if sp.stage != "queue" else StageSpan(999, "queue", sp.t_start, sp.t_end) for sp in collecting_server()]
    reqs = join_by_time(requests_of(spans), spans, {API: API, WORKER: WORKER, 999: WORKER})
    assert _batch_queue_ms(reqs) == pytest.approx(sum(7 - k for k in range(8)))  # the decodes only


def _batch_queue_ms(reqs) -> float:  # type: ignore[no-untyped-def]
    """The queue ms of the first batch's 8 requests (#1..#8), summed."""
    first = {r.id: r for r in reqs if int(r.id.split("#")[1]) <= 8}
    assert len(first) == 8
    return sum(dict(r.stages).get("queue", 0.0) for r in first.values())


def test_in_one_process_the_rest_is_other_and_concurrent_requests_each_get_their_own_call() -> None:
    loop, pool = 10, 11  # an event loop thread and a thread-pool thread of one process
    spans = []
    for i in range(30):
        a = 50.0 + i * 0.004  # a request every 4 ms, each 10 ms long: three at once
        spans.append(StageSpan(pool, "preprocess", a + 0.001, a + 0.001 + 0.002 + 0.0001 * (i % 3)))
        spans.append(StageSpan(loop, "request", a, a + 0.010, request=f"POST /embed #{i + 1}"))
    s = summarize_requests(spans, 1.0, {loop: loop, pool: loop})
    assert s.joined == "time"
    pre = [dict(r.stages)["preprocess"] for r in s.slowest]
    # request i got the call that began 1 ms after it, not an earlier request's
    assert sorted({round(ms, 2) for ms in pre}) == [2.0, 2.1, 2.2]
    assert {st for st, *_ in s.breakdown_ms} == {"preprocess", "other"}


def test_two_api_processes_number_their_requests_apart() -> None:
    spans = [StageSpan(1, "request", 1.0, 1.01, request="GET /a #1"),
             StageSpan(2, "request", 1.0, 1.02, request="GET /a #1"),
             StageSpan(1, "preprocess", 5.0, 5.1, request="mine"),
             StageSpan(2, "forward", 5.1, 5.2, request="mine")]  # fmt: skip
    reqs = requests_of(spans, {1: 1, 2: 2})
    assert sorted(r.id for r in reqs) == ["GET /a #1", "GET /a #1", "mine"]
    mine = next(r for r in reqs if r.id == "mine")
    assert dict(mine.stages) == pytest.approx({"preprocess": 100.0, "forward": 100.0})


def test_a_call_the_agent_missed_shifts_no_other_request_s() -> None:
    loop, pool = 10, 11
    spans = []
    for i in range(30):
        a = 50.0 + i * 0.004  # three requests open at once, as above
        if i != 0:  # the first request's call began before the agent timed anything
            spans.append(StageSpan(pool, "preprocess", a + 0.001, a + 0.001 + 0.002 + 0.0001 * (i % 3)))
        spans.append(StageSpan(loop, "request", a, a + 0.010, request=f"POST /embed #{i + 1}"))
    joined = join_by_time(requests_of(spans), spans)
    for r in joined:
        n = int(r.id.split("#")[1]) - 1
        got = dict(r.stages).get("preprocess")
        assert got is None if n == 0 else got == pytest.approx(2.0 + 0.1 * (n % 3)), (r.id, r.stages)


def test_each_wsgi_worker_s_requests_take_their_own_calls() -> None:
    """Two gunicorn sync workers serve requests at the same time, each whole on its own thread:
    a request takes its own thread's calls, never the other worker's, and nothing of it is a
    hop between processes (``ipc``)."""
    spans = []
    for n in range(20):
        for pid, shift in ((101, 0.0), (202, 0.004)):  # overlapping, the second 4 ms later
            t = n * 0.02 + shift
            spans.append(StageSpan(pid, "request", t, t + 0.012, f"POST /predict #{2 * n + (pid == 202) + 1}"))
            spans.append(StageSpan(pid, "preprocess", t + 0.001, t + 0.004))
            spans.append(StageSpan(pid, "serialize", t + 0.010, t + 0.0105))
    s = summarize_requests(spans, 1.0, {101: 101, 202: 202})
    assert s.joined == "time" and s.count == 40
    br = {st: p50 for st, p50, _p99 in s.breakdown_ms}
    assert "ipc" not in br, s.breakdown_ms
    assert br["preprocess"] == pytest.approx(3.0, abs=0.01) and br["serialize"] == pytest.approx(0.5, abs=0.01)
    reqs = join_by_time(requests_of(spans), spans, {101: 101, 202: 202})
    assert all(dict(r.stages).get("other") == pytest.approx(8.5, abs=0.01) for r in reqs), reqs[:2]
