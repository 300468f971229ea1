"""Shared test helpers: building realistic events and recordings without a target; the order
of the parallel phase."""

from __future__ import annotations

import os
import sys
from itertools import islice
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.hookimpl(trylast=True)  # after -m has deselected: the items are the ones that run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each worker of the parallel phase starts with its share of the ``early`` tests (the ones
    that take longest by the clock, most of it waiting on a target).

    pytest-xdist's worksteal hands each of the N workers a run of the items in order at first
    (the i-th of N gets what is left over N - i), and a worker out of work steals from the
    end of another's run. In the file order the longest test (a minute of ``watch``) came
    last on one worker and the phase ended with the others idle for 35 s of it (5 workers,
    2026-12-06); at the head of each run, the short tests fill in around them."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    early = [item for item in items if item.get_closest_marker("early")]
    if not early or workers < 2:
        return
    rest = iter([item for item in items if not item.get_closest_marker("early")])
    heads: list[list[pytest.Item]] = [early[k::workers] for k in range(workers)]
    ordered: list[pytest.Item] = []
    left = len(items)
    for k, head in enumerate(heads):
        size = left // (workers - k)
        left -= size
        ordered += head + list(islice(rest, max(0, size - len(head))))
    ordered += list(rest)
    items[:] = ordered
