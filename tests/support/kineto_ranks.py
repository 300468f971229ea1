"""Directories of per-rank torch.profiler traces, made of the real traces in tests/data/traces.

A genuinely slower rank is a real trace *transformed*: every timestamp and duration stretched
by a factor about the trace's first event, as if the same work ran that much slower (a GPU
throttled, a host contended). Nothing else changes: names, correlations, sizes stay real.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from tests.support import data

TRACES = data.TRACES


def trace(name: str) -> Path:
    return data.trace(f"{name}.json.gz")


def stretched(src: Path, dst: Path, factor: float, rank: int | None = None) -> Path:
    """``src`` with every ``ts`` and ``dur`` stretched by ``factor`` (about its first ts)."""
    with gzip.open(src, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    t0 = min(e["ts"] for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M")
    for e in events:
        if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M":
            e["ts"] = t0 + (e["ts"] - t0) * factor
        if isinstance(e.get("dur"), (int, float)):
            e["dur"] = e["dur"] * factor
    if rank is not None:
        doc.setdefault("distributedInfo", {})["rank"] = rank
    with gzip.open(dst, "wt") as fh:
        json.dump(doc, fh)
    return dst


def rank_dir(tmp: Path, name: str, factors: list[float]) -> Path:
    """A directory of ``len(factors)`` ranks of trace ``name``: rank k stretched by factors[k]
    (1.0: the real file as it is), each naming its rank in ``distributedInfo``."""
    d = tmp / "ranks"
    d.mkdir()
    for k, f in enumerate(factors):
        out = d / f"{name}_rank{k}.json.gz"
        if f == 1.0 and k == 0:
            shutil.copy(trace(name), out)  # rank 0 in the real file already
        else:
            stretched(trace(name), out, f, rank=k)
    return d
