"""Stage spans of a LitServe-like server (an API process and a worker, one thread each, tid
== pid): requests that arrive at the API and are decoded, batched, predicted and encoded in the
worker, with no request id on the worker's calls (for the join by time and ipc-heavy)."""

from __future__ import annotations

from infertop.model.events import StageSpan

API, WORKER = 100, 200


def batched_server(n_batches: int = 4) -> list[StageSpan]:
    """Requests of 8 arriving 1 ms apart at the API process; in the worker each is decoded
    (1 ms, one after another), the 8 wait for one predict (20 ms), each is encoded (0.5 ms);
    0.3 ms of transit each way."""
    spans = []
    for b in range(n_batches):
        t0 = 10.0 + b
        decode_end = []
        for k in range(8):
            a = t0 + k * 0.001
            d0 = max(a + 0.0003, decode_end[-1] if decode_end else 0.0)
            spans.append(StageSpan(WORKER, "preprocess", d0, d0 + 0.001))
            decode_end.append(d0 + 0.001)
        p0 = decode_end[-1] + 0.002
        spans.append(StageSpan(WORKER, "forward", p0, p0 + 0.020))
        for k in range(8):
            e0 = p0 + 0.020 + k * 0.0005
            spans.append(StageSpan(WORKER, "serialize", e0, e0 + 0.0005))
            a = t0 + k * 0.001
            spans.append(
                StageSpan(
                    API,
                    "request",
                    a,
                    e0 + 0.0005 + 0.0003,
                    request=f"POST /predict #{b * 8 + k + 1}",
                )
            )
    return spans


def collecting_server(n_batches: int = 4) -> list[StageSpan]:
    """LitServe's order: the worker collects a batch first (``collate_requests``, a timed
    ``queue`` call: from 2 ms before the first request comes until the eighth is in), then
    decodes each (1 ms, one after another), predicts (20 ms), encodes each (0.5 ms); 0.3 ms of
    transit each way."""
    spans = []
    for b in range(n_batches):
        t0 = 10.0 + b
        collected = t0 + 0.007 + 0.0003
        spans.append(StageSpan(WORKER, "queue", t0 - 0.002, collected))
        for k in range(8):
            spans.append(
                StageSpan(WORKER, "preprocess", collected + k * 0.001, collected + (k + 1) * 0.001)
            )
        p0 = collected + 0.008
        spans.append(StageSpan(WORKER, "forward", p0, p0 + 0.020))
        for k in range(8):
            e0 = p0 + 0.020 + k * 0.0005
            spans.append(StageSpan(WORKER, "serialize", e0, e0 + 0.0005))
            spans.append(StageSpan(API, "request", t0 + k * 0.001, e0 + 0.0005 + 0.0003,
                                   request=f"POST /predict #{b * 8 + k + 1}"))  # fmt: skip
    return spans
