"""Fixtures for the collector tests: fake agents that are cleaned up after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.collect.fake_agent import FakeAgent, Script


@pytest.fixture
def agents() -> Iterator[Callable[..., FakeAgent]]:
    made: list[FakeAgent] = []

    def make(script: Script, mode: int = 0o700) -> FakeAgent:
        made.append(FakeAgent(script, mode))
        return made[-1]

    yield make
    for a in made:
        a.close()
