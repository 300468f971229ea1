"""What the UI's tail view draws besides ``Snapshot.tails``: each stage's slow calls as a flame
with its typical calls' shares as the base (the differential flame of ``flame_diff``: red, a
call path the slow calls spend more of their time in), and the names of the slow calls'
threads. Built by the UI's ingest worker, off the UI thread, while the view is open."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from infertop.analysis.flame import FlameNode, build_flame
from infertop.analysis.flame_diff import BaseShares
from infertop.analysis.stages import IDLE
from infertop.analysis.tail import StageTail
from infertop.model.events import Frame

#: the stage label of a sample that waited inside a call (stage ``idle`` elsewhere): the
#: flame of a call keeps its waits, since they are part of its time
WAITING = "waiting"


@dataclass(frozen=True)
class TailFlame:
    stage: str
    slow: FlameNode  # the slow calls' samples
    typical: BaseShares  # the typical calls' share of each call path: what ``slow`` is against


@dataclass(frozen=True)
class TailView:
    flames: dict[str, TailFlame] = field(default_factory=dict)  # by stage
    thread_names: dict[int, str] = field(default_factory=dict)  # of the slow calls' threads
    #: call samples in the session (0: the agent's call sampler never ran) and their rate
    call_samples: int = 0
    rate_hz: float = 0.0


def tail_view(
    tails: Sequence[StageTail],
    frames_of: Callable[[int], Sequence[Frame]],
    stage_of: Callable[[int], str],
    threads: dict[int, str],
    call_samples: int = 0,
    rate_hz: float = 0.0,
) -> TailView:
    """``frames_of``: the stacks as the flame shows them (folded or not, lines or not), so
    the tail's flame reads as the main one does."""

    def stage(sid: int) -> str:
        s = stage_of(sid)
        return WAITING if s == IDLE else s  # build_flame leaves idle stacks out

    def flame(counts: dict[int, int]) -> FlameNode:
        return build_flame(sorted(counts.items()), frames_of, stage)

    flames = {
        t.stage: TailFlame(t.stage, flame(t.slow_stacks), BaseShares(flame(t.typical_stacks)))
        for t in tails
    }
    tids = {c.tid for t in tails for c in t.slowest}
    names = {tid: threads[tid] for tid in tids if tid in threads}
    return TailView(flames, names, call_samples, rate_hz)
