"""One definition of a device sync: ``report TRACE`` and ``import`` + ``report`` list the same
``gpu.syncs`` rows (blocking runtime calls and Kineto's cuda_sync events, by name), as the live
agent counts them. The trace report once had only a count of cuda_sync events, and its host-sync
evidence a list of its own that left out a blocking ``cudaMemcpy``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests.support import data
from tests.support.roads import both_roads

TRACE = "a100_alexnet_pageable_memcpy.json.gz"


def _with_a_blocking_memcpy(tmp_path: Path) -> Path:
    """The A100 AlexNet trace with one of its runtime launches renamed a synchronous
    ``cudaMemcpy``, which blocks the host as a synchronize does."""
    with gzip.open(data.trace(TRACE), "rt") as fh:
        doc = json.load(fh)
    launches = [e for e in doc["traceEvents"]
                if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaMemcpyAsync"]  # fmt: skip
    assert launches, "the trace has async copies"
    launches[0]["name"] = "cudaMemcpy"
    out = tmp_path / "blocking.json.gz"
    with gzip.open(out, "wt") as fh:
        json.dump(doc, fh)
    return out


def _rows(rep: dict) -> dict[str, tuple[int, float]]:
    return {r["name"]: (r["count"], round(r["total_us"], 1)) for r in rep["gpu"]["syncs"]}


def test_a_trace_and_its_import_list_the_same_syncs(capsys, tmp_path: Path) -> None:
    direct, imported = both_roads(capsys, _with_a_blocking_memcpy(tmp_path), tmp_path)
    assert _rows(direct) == _rows(imported), (direct["gpu"]["syncs"], imported["gpu"]["syncs"])
    assert _rows(direct)["cudaMemcpy"][0] == 1
    # Kineto's own sync events are rows too, and their count is still the trace's sync_events
    events = sum(c for n, (c, _) in _rows(direct).items() if not n.startswith("cuda"))
    assert events == direct["gpu"]["sync_events"] == 41
