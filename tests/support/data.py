"""The test data committed under ``tests/data/``: one place to find it.

A missing file is a broken checkout, not a reason to skip: ``trace(name)`` fails the test
that asked for it, with the path it looked at.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = DATA / "traces"  # real torch.profiler traces (README.md there: origin, licence)


def trace(name: str) -> Path:
    path = TRACES / name
    if not path.is_file():
        pytest.fail(f"test data missing: {path} (tests/data/ is part of the repository)")
    return path


def gpu_traces() -> list[Path]:
    """Every committed trace, sorted by name."""
    found = sorted(TRACES.glob("*.json.gz"))
    if not found:
        pytest.fail(f"test data missing: no traces in {TRACES}")
    return found
