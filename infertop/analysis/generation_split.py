"""Prefill and decode by the agent's clock: a thread's generation samples split at first tokens.

The stack rules (``config.GENERATION_RULES``) put a sample in ``prefill`` or ``decode`` by the
frame it is in. Where a generation call ends its prefill is not a frame, though: the first new
token is chosen in the decode loop's first step (Hugging Face ``_sample`` processes the
prompt's logits and samples from them before its second forward), and the stacks read that as
decode. The stacks gave prefill 28.8 % of the generation time of the text-generation sample
(``--hf``, batches of 2-8) and 21.4 % of a LitServe worker's, where the services' own clocks
said 32.0 % and 26.8 % (docs/performance.md).

Where the agent timed a thread's generation calls (``GenerationCall``: its start, first token
and end, as the service's own clock has them), that thread's prefill and decode samples of each
window, together, are split in the ratio of the calls' prefill and decode seconds inside the
window. Samples keep their stacks (the flame is unchanged); only the two stages' counts move.
Threads or windows without such calls keep the stack rules' split.

Windows and calls arrive in either order (a call comes when it ends, after the windows that
hold its start): each (window, call) pair is applied once, by whichever arrives second.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from infertop.analysis.windows import WindowSummary
from infertop.model.events import GenerationCall

PREFILL, DECODE = "prefill", "decode"
#: how long a window stays open to calls that arrive after it (a generation call comes when it
#: ends: a call longer than this leaves its older windows split by the stacks)
OPEN_S = 60.0


@dataclass(slots=True)
class _Open:
    summary: WindowSummary
    #: (per-thread counts, the window's totals) of each view, the wall view only where it is
    #: another object than the CPU view's (a wall window's are the same dicts)
    views: list[tuple[dict[int, dict[str, int]], dict[str, int]]]
    #: tid -> the stacks' prefill + decode samples in each view
    stacked: dict[int, list[int]] = field(default_factory=dict)
    #: tid -> [prefill seconds, decode seconds] of the calls inside the window
    spent: dict[int, list[float]] = field(default_factory=dict)


class GenerationSplit:
    """Feed it the session's windows (``window``) and generation calls (``call``); it moves the
    windows' prefill and decode counts in place."""

    def __init__(self) -> None:
        self._open: deque[_Open] = deque()
        self._calls: deque[GenerationCall] = deque()

    def window(self, ws: WindowSummary) -> None:
        views = [(ws.by_thread, ws.stage_counts)]
        if ws.wall_counts is not None and ws.wall_counts is not ws.stage_counts:
            views.append((ws.wall_by_thread, ws.wall_counts))
        state = _Open(ws, views)
        for i, (per_thread, _totals) in enumerate(views):
            for tid, per in per_thread.items():
                n = per.get(PREFILL, 0) + per.get(DECODE, 0)
                if n:
                    state.stacked.setdefault(tid, [0] * len(views))[i] = n
        if not state.stacked:
            return
        t0, t1 = ws.window.t_start, ws.window.t_end
        touched = {c.tid for c in self._calls if c.tid in state.stacked and _into(state, c, t0, t1)}
        for tid in touched:
            _resplit(state, tid)
        self._open.append(state)
        self._forget(t1 - OPEN_S)

    def call(self, c: GenerationCall) -> None:
        if c.t_first is None or not c.t_start <= c.t_first <= c.t_end or not c.t_end > c.t_start:
            return
        self._calls.append(c)
        for state in self._open:
            w = state.summary.window
            if c.tid in state.stacked and _into(state, c, w.t_start, w.t_end):
                _resplit(state, c.tid)
        self._forget(c.t_end - OPEN_S)

    def forget(self, before: float) -> None:
        """Windows that end before ``before`` are folded by the session: leave them be."""
        while self._open and self._open[0].summary.window.t_end < before:
            self._open.popleft()

    def _forget(self, before: float) -> None:
        self.forget(before)
        while self._calls and self._calls[0].t_end < before:
            self._calls.popleft()


def _into(state: _Open, c: GenerationCall, t0: float, t1: float) -> bool:
    """Add the call's prefill and decode seconds inside [t0, t1) to the window's; False when it
    has none there. (``call`` keeps only calls with a first token.)"""
    first = c.t_first
    assert first is not None
    prefill = max(0.0, min(first, t1) - max(c.t_start, t0))
    decode = max(0.0, min(c.t_end, t1) - max(first, t0))
    if prefill + decode <= 0:
        return False
    spent = state.spent.setdefault(c.tid, [0.0, 0.0])
    spent[0] += prefill
    spent[1] += decode
    return True


def _resplit(state: _Open, tid: int) -> None:
    prefill_s, decode_s = state.spent[tid]
    for (per_thread, totals), n in zip(state.views, state.stacked[tid], strict=True):
        if not n:
            continue
        per = per_thread[tid]
        prefill = round(n * prefill_s / (prefill_s + decode_s))
        for stage, new in ((PREFILL, prefill), (DECODE, n - prefill)):
            old = per.get(stage, 0)
            if new == old:
                continue
            per[stage] = new
            totals[stage] = totals.get(stage, 0) + new - old
