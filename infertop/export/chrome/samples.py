"""A per-thread timeline from py-spy sample windows.

A sample window says how many times each (thread, stack) was seen in about a second, not when.
The timeline therefore lays each window's samples out from the window's start, one sample period
(window length / ticks) each, ordered by stage and then by call path, like a flame graph per
window: a slice's width is true (samples × period), its position within its window is not.
Identical consecutive stacks merge, and frames shared by consecutive stacks stay open, across
windows too when the thread was busy until the next window began. Threads idle for part of a
window simply have no slice there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from infertop.config import STAGES
from infertop.export.jsonout import us as _us
from infertop.model.events import Frame, SampleWindow, window_ticks

Emit = Callable[[dict], None]


@dataclass
class _Thread:
    track: int
    stage_track: int
    frames: list[int] = field(default_factory=list)  # open frame ids, root first
    stage: str | None = None
    last_end: int = 0  # ns: where the thread's last sample ended
    pid: int = 0  # the Chrome process its tracks are in


class SampleTimeline:
    """Turns sample windows into B/E slices on each thread's track and its stage track."""

    def __init__(
        self,
        emit: Emit,
        pid: int,
        frames: list[Frame],
        stacks: list[tuple[int, ...]],
        stage_of: Callable[[int], str],
        ns: Callable[[float], int],
        track_of: Callable[[int], tuple[int, int]],
        pid_of: Callable[[int], int] | None = None,
    ) -> None:
        """``pid_of``: the Chrome process of a thread's tracks (default: ``pid`` for all)."""
        self.emit, self.pid, self.frames, self.stacks = emit, pid, frames, stacks
        self.pid_of = pid_of or (lambda _tid: pid)
        self.stage_of, self.ns, self.track_of = stage_of, ns, track_of
        self.threads: dict[int, _Thread] = {}
        self._rank = {s: i for i, s in enumerate(STAGES)}
        self.slices = 0

    def window(self, w: SampleWindow) -> None:
        ticks = window_ticks(w)
        period = max(1.0, (w.t_end - w.t_start) * 1e9 / ticks)
        start = self.ns(w.t_start)
        per_thread: dict[int, list[tuple[int, int]]] = {}
        for tid, sid, n in w.counts:
            if n > 0 and 0 <= sid < len(self.stacks):
                per_thread.setdefault(tid, []).append((sid, n))
        for tid, rows in per_thread.items():
            th = self.threads.get(tid)
            if th is None:
                track, stage_track = self.track_of(tid)
                th = self.threads[tid] = _Thread(track, stage_track, pid=self.pid_of(tid))
            elif th.frames and start - th.last_end > 1.5 * period:
                self._close(th, th.last_end)  # the thread had nothing to do in between
            base = max(start, th.last_end)
            rows.sort(key=lambda r: (self._stage_rank(self.stage_of(r[0])), self.stacks[r[0]]))
            k = 0
            for sid, n in rows:
                t0 = base + round(k * period)
                k += n
                self._move(th, self.stacks[sid], self.stage_of(sid), t0)
            th.last_end = base + round(k * period)

    def _stage_rank(self, stage: str) -> tuple[int, str]:
        return (self._rank.get(stage, len(self._rank)), stage)

    def _move(self, th: _Thread, stack: tuple[int, ...], stage: str, t: int) -> None:
        """Close what the new stack does not share with the open one, open the rest, at t."""
        common = 0
        for a, b in zip(th.frames, stack):
            if a != b:
                break
            common += 1
        ts = _us(t)
        emit, pid = self.emit, th.pid
        if th.stage is not None and th.stage != stage:
            emit({"ph": "E", "pid": pid, "tid": th.stage_track, "ts": ts})
            th.stage = None
        for _ in range(len(th.frames) - common):
            emit({"ph": "E", "pid": pid, "tid": th.track, "ts": ts})
        del th.frames[common:]
        if th.stage is None:
            emit(
                {
                    "ph": "B",
                    "pid": pid,
                    "tid": th.stage_track,
                    "ts": ts,
                    "name": stage,
                    "cat": "stage",
                }
            )
            th.stage = stage
            self.slices += 1
        for fid in stack[common:]:
            f = self.frames[fid]
            emit(
                {
                    "ph": "B",
                    "pid": pid,
                    "tid": th.track,
                    "ts": ts,
                    "name": f.function,
                    "cat": "python",
                    "args": {"at": f"{f.file}:{f.line}"},
                }
            )
            th.frames.append(fid)
            self.slices += 1

    def _close(self, th: _Thread, t: int) -> None:
        ts = _us(t)
        for _ in th.frames:
            self.emit({"ph": "E", "pid": th.pid, "tid": th.track, "ts": ts})
        th.frames.clear()
        if th.stage is not None:
            self.emit({"ph": "E", "pid": th.pid, "tid": th.stage_track, "ts": ts})
            th.stage = None

    def finish(self) -> None:
        for th in self.threads.values():
            self._close(th, th.last_end)
