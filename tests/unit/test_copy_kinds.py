"""One classification of copies: ``report TRACE`` and ``import`` + ``report`` put every copy in
the same row as the live agent would. Made from a real trace (the A100 AlexNet one) with one
host-to-host copy and one pageable memset written into it: the two kinds the trace report's own
classifier once called ``unknown`` and ``device``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests.support import data
from tests.support.roads import both_roads

HTOH = "Memcpy HtoH (Pinned -> Pageable)"
MEMSET = "Memset (Pageable)"


def _trace_with_rare_copies(tmp_path: Path) -> Path:
    with gzip.open(data.trace("a100_alexnet_pageable_memcpy.json.gz"), "rt") as fh:
        doc = json.load(fh)
    copies = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    sets = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memset"]
    assert copies and sets, "the trace has copies and memsets"
    copies[0]["name"], sets[0]["name"] = HTOH, MEMSET
    out = tmp_path / "rare.json.gz"
    with gzip.open(out, "wt") as fh:
        json.dump(doc, fh)
    return out


def _memcpy_rows(rep: dict) -> dict[tuple[str, str], int]:
    return {(r["kind"], r["host_memory"]): r["count"] for r in rep["gpu"]["memcpy"]}


def test_rare_copy_kinds_land_in_one_row_by_both_roads(capsys, tmp_path: Path) -> None:
    reports = both_roads(capsys, _trace_with_rare_copies(tmp_path), tmp_path)
    direct, imported = (_memcpy_rows(r) for r in reports)
    assert direct == imported
    assert direct[("HtoH", "pageable")] == 1  # pinned to pageable: the pageable side counts
    assert direct[("memset", "pageable")] == 1
    assert direct[("HtoD", "pageable")] == 15 and direct[("memset", "device")] == 2
