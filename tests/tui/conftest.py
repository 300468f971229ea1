"""Shared fixtures for the TUI tests: a real recording read back, and a live source."""

from __future__ import annotations

from pathlib import Path

import pytest
from tui_data import TARGET, ScriptedCollector, write_recording

from infertop.config import Config
from infertop.record.reader import read_recording
from infertop.sources import LiveSource, ReplaySource


@pytest.fixture
def recording_path(tmp_path: Path) -> Path:
    return write_recording(tmp_path / "run.infertop")


@pytest.fixture
def replay_source(recording_path: Path) -> ReplaySource:
    return ReplaySource(read_recording(str(recording_path)), Config())


@pytest.fixture
def live_source() -> LiveSource:
    return LiveSource(TARGET, Config(), collectors=[ScriptedCollector()])
