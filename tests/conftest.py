"""Shared test helpers: building realistic events and recordings without a target."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


pytest_plugins = ["tests.cpu_cost"]  # INFERTOP_TEST_CPU=FILE: each test's CPU (tests/cpu_cost.py)


@pytest.fixture
def repo_root() -> Path:
    return ROOT
