"""Requests named by the application (``infertop.stage(..., request=ID)``): the annotation's
id reaches the agent's sink (and an older sink still gets the span), the wire and the file
carry it, and spans group into requests with their stage breakdown (analysis/requests.py)."""

from __future__ import annotations

import pytest

import infertop.annotate as annotate
from infertop.analysis.requests import requests_of, summarize_requests
from infertop.collect.agent_client import convert
from infertop.model.events import StageSpan
from infertop.record.format import decode_event, encode_event


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
