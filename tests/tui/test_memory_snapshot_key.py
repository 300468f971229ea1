"""Key ``m`` in the live UI: the agent is asked for a CUDA memory snapshot written into the
current folder (where ``r`` records), and the agent's status line says where it went
(docs/memory-snapshot.md). The agent here is a stand-in: the real client's side is tested in
tests/collect/test_memory_snapshot.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tui_data import TARGET, ScriptedCollector, shows, wait_for

from infertop.config import Config
from infertop.model.events import CollectorStatus
from infertop.sources import LiveSource
from infertop.tui import create_app
from infertop.tui.keys import LIVE_BINDINGS, REPLAY_BINDINGS

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "memory_snapshot" / "snapshot.pickle"


class SnapshotAgent:
    """Says it runs; on ``memory_snapshot`` writes the fixture where asked and says so."""

    name = "agent"

    def __init__(self) -> None:
        self.asked: list[tuple[float, str]] = []
        self._pending: list[object] = []

    def start(self) -> None:
        self._pending.append(CollectorStatus(time.time(), self.name, "running", "stage calls"))

    def memory_snapshot(self, seconds: float, dest: str) -> None:
        self.asked.append((seconds, dest))
        Path(dest).write_bytes(FIXTURE.read_bytes())
        self._pending.append(CollectorStatus(time.time(), self.name, "running",
                                             f"CUDA memory snapshot written to {dest}"))  # fmt: skip

    def poll(self) -> list[object]:
        out, self._pending = self._pending, []
        return out

    def stop(self) -> None:
        pass


def test_m_is_a_live_key_with_help() -> None:
    (binding,) = [b for b in LIVE_BINDINGS if getattr(b, "action", None) == "memory_snapshot"]
    assert binding.key == "m" and "memory_viz" in binding.tooltip
    assert not [b for b in REPLAY_BINDINGS if getattr(b, "key", None) == "m"]


def _written_here(dest: str, folder: Path) -> None:
    assert Path(dest).parent == folder.resolve()
    assert Path(dest).name.startswith(f"memory-snapshot-{TARGET.pid}-")
    assert Path(dest).read_bytes() == FIXTURE.read_bytes()


async def test_m_asks_the_agent_and_the_status_line_says_where(tmp_path: Path) -> None:
    here = os.getcwd()
    os.chdir(tmp_path)  # m writes into the current directory, as r records there
    try:
        agent = SnapshotAgent()
        src = LiveSource(TARGET, Config(), collectors=[ScriptedCollector(), agent])
        app = create_app(src, title="infertop")
        async with app.run_test(size=(250, 40)) as pilot:
            await shows(pilot, app, "stage calls", timeout=20)
            await pilot.press("m")
            await wait_for(pilot, lambda: agent.asked, 10)
            await shows(pilot, app, "CUDA memory snapshot written to", timeout=10)
        ((seconds, dest),) = agent.asked
        assert seconds == 10.0
        _written_here(dest, tmp_path)
    finally:
        os.chdir(here)
