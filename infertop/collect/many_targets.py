"""Several target processes in one session (``infertop attach PID PID ...``).

``ManyTargets`` is one collector over a ``PySpyCollector`` per target, each naming its
process in every window (with ``--children``, each follows its own tree). The first pid is
the session's target; the others are processes of the session like children are. A target
that exits gets the ``process PID exited`` marker a child gets, and the rest carries on;
the session ends when every target has exited. The py-spy statuses are summed up in one.
"""

from __future__ import annotations

import time

from infertop.collect.pyspy import PySpyCollector
from infertop.collect.tree import exit_marker, read_cmdline
from infertop.model.events import CollectorStatus, TargetExited

#: the worst state wins the summed-up status
_RANK = {"failed": 3, "unavailable": 2, "running": 1, "stopped": 0}


class ManyTargets:
    name = "py-spy"

    def __init__(
        self,
        pids: list[int],
        rate_hz: float,
        window_s: float,
        children: bool = False,
        cpu_every: int = 2,
        realtime: bool = False,
    ) -> None:
        self.pids = list(pids)
        self.cmdlines = {pid: read_cmdline(pid) for pid in self.pids}
        self.spies = [
            PySpyCollector(pid, rate_hz, window_s, children, tag=True, cpu_every=cpu_every,
                           realtime=realtime)  # fmt: skip
            for pid in pids
        ]
        self._statuses: dict[int, CollectorStatus] = {}
        self._exited: dict[int, float] = {}
        self._ended = False

    def start(self) -> None:
        for spy in self.spies:
            spy.start()

    def stop(self) -> None:
        for spy in self.spies:
            spy.stop()

    def poll(self) -> list[object]:
        out: list[object] = []
        changed = False
        for spy in self.spies:
            for ev in spy.poll():
                if isinstance(ev, TargetExited):
                    self._exited.setdefault(spy.pid, ev.t)
                    out.append(exit_marker(ev.t, spy.pid, self.cmdlines.get(spy.pid, "")))
                elif isinstance(ev, CollectorStatus):
                    self._statuses[spy.pid] = ev
                    changed = True
                else:
                    out.append(ev)
        if changed:
            out.append(self._summary())
        if len(self._exited) == len(self.pids) and not self._ended:
            self._ended = True
            out.append(TargetExited(max(self._exited.values()), "every target process exited"))
        return out

    def _summary(self) -> CollectorStatus:
        """Running while any target is sampled; the first target's message, with what went
        wrong with the others (if anything)."""
        live = [s for pid, s in self._statuses.items() if pid not in self._exited]
        live = live or list(self._statuses.values())
        running = any(s.state == "running" for s in live)
        state = "running" if running else max(live, key=lambda s: _RANK.get(s.state, 0)).state
        first = self._statuses.get(self.pids[0])
        parts = [f"{len(self.pids)} target processes"]
        if first is not None and first.message:
            parts.insert(0, first.message)
        parts += [
            f"pid {pid}: {s.message}"
            for pid, s in sorted(self._statuses.items())
            if pid != self.pids[0] and s.state in ("failed", "unavailable")
        ][:3]
        return CollectorStatus(time.time(), self.name, state, "; ".join(parts))
