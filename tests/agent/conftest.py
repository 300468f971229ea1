"""Fixtures for the agent tests (helpers live in agenthelpers.py)."""

from __future__ import annotations

import fcntl
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agenthelpers import Target, start_target  # noqa: E402


@pytest.fixture
def targets(tmp_path):
    """Start targets with ``targets(...)``; all are stopped (and checked for exit) at the end."""
    started: list[Target] = []

    def start(*args, **kwargs) -> Target:
        t = start_target(tmp_path, *args, **kwargs)
        started.append(t)
        return t

    yield start
    for t in started:
        if t.proc.poll() is None:
            t.stop()


@pytest.fixture
def nobody_socket_dir_turn():
    """The tests that plant, make or remove user nobody's socket folder (/tmp/infertop-65534)
    take turns, whichever workers run them (``make test-together`` runs them side by side)."""
    with open("/tmp/infertop-tests-nobody.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
