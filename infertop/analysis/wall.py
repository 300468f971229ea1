"""The wall view of a sample window: every sample of the threads that do pipeline work.

py-spy's ``--idle`` windows hold every thread's stack at every tick and do not say which
samples were idle. Stage frames decide most of them: a thread waiting inside a stage's frames
(a Rust tokenizer encoding on its own threads, a blocking device sync) is in that stage, and a
thread in a Python-level wait (``config.WAIT_FRAMES``) is ``queue`` or ``idle`` by the classifier.
Two things need more than the stack, and the CPU windows in between give them:

- **Which threads do pipeline work.** A thread counts when at least ``PIPELINE_MIN_SHARE`` of
  its samples outside ``queue`` and frame-idle waits fall in a work stage (not ``other``,
  ``idle``, ``queue`` or infertop's own), over the session so far, with at least
  ``PIPELINE_MIN_SAMPLES`` of them. Queue waits neither make a thread a pipeline thread nor
  keep it from being one: a batcher that waits 97 % of the time and runs the model for the rest
  is one; a client thread that puts requests in a queue and waits for the reply is not. A
  helper thread that sleeps in ``time.sleep`` between writes, a metrics thread, an HTTP client
  waiting for its reply: never pipeline threads, so they add nothing to the wall view (their
  CPU, if any, is in the CPU view).
- **Waiting outside every stage.** A pipeline thread's ``other`` samples are its active
  ``other`` time plus time blocked in C outside every stage (a ``time.sleep`` in its loop). The
  thread's active ``other`` rate is measured in its recent CPU windows; in a wall window its
  ``other`` keeps at most that many samples and the rest is ``idle``.

CPU windows get a wall view too, so that the wall view covers the whole session and not every
other second (a torch.profiler window of the agent, a burst of traffic, lands in either kind):
a pipeline thread's active samples are measured; the samples a CPU window leaves out (its
samples per tick in recent wall windows, less its active ones) are spread over the stages in
which its recent wall windows had more samples than its CPU windows did.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

OTHER, IDLE = "other", "idle"
QUEUE = "queue"
#: stages that are not pipeline work (``infertop``: the injected agent's own thread)
NOT_WORK = frozenset({OTHER, IDLE, QUEUE, "infertop"})
PIPELINE_MIN_SHARE = 0.25
PIPELINE_MIN_SAMPLES = 3
RECENT = 8  # a thread's rates are of its last 8 CPU windows and last 8 wall windows


@dataclass(slots=True)
class _Thread:
    pipeline: int = 0  # wall samples in work stages, session so far
    busy: int = 0  # wall samples neither frame-idle nor queue, session so far
    #: (stage counts, ticks) of the recent CPU windows (active samples) and wall windows (the
    #: wall view's counts)
    cpu: deque[tuple[dict[str, int], int]] = field(default_factory=lambda: deque(maxlen=RECENT))
    wall: deque[tuple[dict[str, int], int]] = field(default_factory=lambda: deque(maxlen=RECENT))

    def is_pipeline(self) -> bool:
        return self.pipeline >= PIPELINE_MIN_SAMPLES and self.pipeline >= PIPELINE_MIN_SHARE * self.busy

    def other_rate(self) -> float | None:
        ticks = sum(t for _c, t in self.cpu)
        return sum(c.get(OTHER, 0) for c, _t in self.cpu) / ticks if ticks else None

    def idle_rates(self) -> tuple[float, dict[str, float]] | None:
        """(samples per tick, and idle samples per tick by stage) from the recent windows: what a
        CPU window leaves out of this thread. None before any wall window."""
        wall_ticks = sum(t for _c, t in self.wall)
        cpu_ticks = sum(t for _c, t in self.cpu)
        if not wall_ticks or not cpu_ticks:
            return None
        wall: dict[str, int] = {}
        for c, _t in self.wall:
            for stage, n in c.items():
                wall[stage] = wall.get(stage, 0) + n
        cpu: dict[str, int] = {}
        for c, _t in self.cpu:
            for stage, n in c.items():
                cpu[stage] = cpu.get(stage, 0) + n
        rates = {s: n / wall_ticks - cpu.get(s, 0) / cpu_ticks for s, n in wall.items()}
        return sum(wall.values()) / wall_ticks, {s: r for s, r in rates.items() if r > 0}


class WallAttribution:
    """Turns windows into per-thread stage counts of the wall view, in session order."""

    def __init__(self) -> None:
        self._threads: dict[int, _Thread] = {}

    def _thread(self, tid: int) -> _Thread:
        th = self._threads.get(tid)
        if th is None:
            th = self._threads[tid] = _Thread()
        return th

    def cpu_window(
        self, by_thread: dict[int, dict[str, int]], ticks: int, tids: Iterable[int]
    ) -> dict[int, dict[str, int]] | None:
        """Note a CPU window's samples (``by_thread``: active samples by stage, frame-idle ones
        under ``idle``; ``tids``: every thread known, so that one with no active sample counts as
        idle throughout) and return the window's wall view, estimated: each pipeline thread's
        active samples as they are, plus the samples the window left out (the thread's samples
        per tick in its recent wall windows, less its active ones), spread over the stages its
        recent wall windows had idle samples in. None before any wall window."""
        out: dict[int, dict[str, int]] = {}
        known = False
        for tid in set(tids) | set(by_thread):
            th = self._thread(tid)
            active = by_thread.get(tid, {})
            if th.is_pipeline():
                rates = th.idle_rates()
                if rates is not None:
                    known = True
                    out[tid] = _with_idle(active, ticks, *rates)
            th.cpu.append((dict(active), ticks))
        return out if known else None

    def wall_window(self, by_thread: dict[int, dict[str, int]], ticks: int) -> dict[int, dict[str, int]]:
        """A wall window's counts as the wall view has them: pipeline threads only, their
        ``other`` beyond the active rate moved to ``idle``."""
        for tid, stages in by_thread.items():
            th = self._thread(tid)
            th.pipeline += sum(n for s, n in stages.items() if s not in NOT_WORK)
            th.busy += sum(n for s, n in stages.items() if s not in (IDLE, QUEUE))
        out: dict[int, dict[str, int]] = {}
        for tid, stages in by_thread.items():
            th = self._threads[tid]
            mine = dict(stages)
            rate = th.other_rate()
            other = mine.get(OTHER, 0)
            if rate is not None and other:
                keep = min(other, round(rate * ticks))
                mine[OTHER] = keep
                mine[IDLE] = mine.get(IDLE, 0) + other - keep
            mine = {s: n for s, n in mine.items() if n}
            # a copy: the session moves the window's counts later (analysis/generation_split.py),
            # and the rates compare these with the CPU windows' as the stacks gave both
            th.wall.append((dict(mine), ticks))
            if th.is_pipeline():
                out[tid] = mine
        return out


def _with_idle(
    active: dict[str, int], ticks: int, per_tick: float, idle_rates: dict[str, float]
) -> dict[str, int]:
    missing = max(0.0, per_tick * ticks - sum(active.values()))
    out = dict(active)
    total = sum(idle_rates.values())
    if missing and total > 0:
        for stage, rate in idle_rates.items():
            out[stage] = out.get(stage, 0) + round(missing * rate / total)
    elif missing:
        out[IDLE] = out.get(IDLE, 0) + round(missing)
    return {s: n for s, n in out.items() if n}


def by_thread_stages(
    counts: Iterable[tuple[int, int, int]], stage_of: Callable[[int], str]
) -> dict[int, dict[str, int]]:
    """(tid, stack id, n) rows as stage counts per thread."""
    out: dict[int, dict[str, int]] = {}
    for tid, sid, n in counts:
        per = out.setdefault(tid, {})
        stage = stage_of(sid)
        per[stage] = per.get(stage, 0) + n
    return out
