"""Shared test helpers: building realistic events and recordings without a target."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


pytest_plugins = ["tests.cpu_cost"]  # INFERTOP_TEST_CPU=FILE: each test's CPU (tests/cpu_cost.py)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``long`` tests first, in the order collected: a worker that starts one last (the watch
    tests are collected last) leaves the others idle for its minute (52 s of a 389 s phase,
    2026-12-07), where started first the shorter tests fill the time it waits. Under ``make
    test``'s ``--dist worksteal`` they open the first worker's share and the others take
    tests from its end (380 s; ``--dist load`` gave that worker the last big file too: 426 s)."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture
def repo_root() -> Path:
    return ROOT
