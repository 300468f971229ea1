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
CPU_WINDOWS_KEPT = 8  # a thread's active ``other`` rate: over its last 8 CPU windows


@dataclass(slots=True)
class _Thread:
    pipeline: int = 0  # wall samples in work stages, session so far
    busy: int = 0  # wall samples neither frame-idle nor queue, session so far
    #: (active ``other`` samples, ticks) of the recent CPU windows
    cpu: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=CPU_WINDOWS_KEPT))

    def is_pipeline(self) -> bool:
        return self.pipeline >= PIPELINE_MIN_SAMPLES and self.pipeline >= PIPELINE_MIN_SHARE * self.busy

    def other_rate(self) -> float | None:
        ticks = sum(t for _n, t in self.cpu)
        return sum(n for n, _t in self.cpu) / ticks if ticks else None


class WallAttribution:
    """Turns windows into per-thread stage counts of their view, in session order."""

    def __init__(self) -> None:
        self._threads: dict[int, _Thread] = {}

    def _thread(self, tid: int) -> _Thread:
        th = self._threads.get(tid)
        if th is None:
            th = self._threads[tid] = _Thread()
        return th

    def cpu_window(self, by_thread: dict[int, dict[str, int]], ticks: int, tids: Iterable[int]) -> None:
        """Note a CPU window's active samples (``tids``: every thread known, so that a thread with
        no active ``other`` sample in it counts as having none)."""
        for tid in set(tids) | set(by_thread):
            self._thread(tid).cpu.append((by_thread.get(tid, {}).get(OTHER, 0), ticks))

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
            if not th.is_pipeline():
                continue
            mine = dict(stages)
            rate = th.other_rate()
            other = mine.get(OTHER, 0)
            if rate is not None and other:
                keep = min(other, round(rate * ticks))
                mine[OTHER] = keep
                mine[IDLE] = mine.get(IDLE, 0) + other - keep
            out[tid] = {s: n for s, n in mine.items() if n}
        return out

    def pipeline_threads(self) -> list[int]:
        return [tid for tid, th in self._threads.items() if th.is_pipeline()]


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
