"""Span durations folded into fixed log-spaced bins: whole-session latency percentiles in
bounded memory.

A live session keeps each stage span's duration exactly only for its recent horizon; older
durations land in a ``DurationHistogram`` whose bins are 1 % wide (a percentile read from it is
within 0.5 % of the exact one), from 1 µs to ~28 hours, so its size never grows with the
session.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from infertop.analysis.shares import Latency, percentile

LOWEST_MS = 1e-3  # 1 µs: shorter spans share the first bin
GROWTH = 1.01  # each bin is 1 % wider than the one before
BINS = int(math.log(1e8 / LOWEST_MS) / math.log(GROWTH)) + 2  # up to ~28 h (1e8 ms)
_LOG_GROWTH = math.log(GROWTH)


def _bin_of(ms: np.ndarray) -> np.ndarray:
    x = np.log(np.maximum(ms, LOWEST_MS) / LOWEST_MS) / _LOG_GROWTH
    return np.minimum(x.astype(np.int64), BINS - 1)


def _value_of(b: int) -> float:
    """The bin's representative duration: its geometric middle (the lowest bin: its floor)."""
    return LOWEST_MS * GROWTH ** (b + 0.5) if b else LOWEST_MS


class DurationHistogram:
    """Counts of span durations (ms) in log-spaced bins; merged with exact values when read."""

    __slots__ = ("counts", "n")

    def __init__(self) -> None:
        self.counts = np.zeros(BINS, dtype=np.int64)
        self.n = 0

    def add_many(self, durations_ms: Iterable[float]) -> None:
        values = np.fromiter(durations_ms, dtype=np.float64)
        if values.size:
            self.counts += np.bincount(_bin_of(values), minlength=BINS)
            self.n += int(values.size)

    def latency(self, exact_sorted: Sequence[float] = ()) -> tuple[int, Latency] | None:
        """(calls, p50/p95/p99) over the folded durations and ``exact_sorted`` together."""
        if not self.n:
            if not exact_sorted:
                return None
            return len(exact_sorted), Latency(
                percentile(exact_sorted, 50), percentile(exact_sorted, 95), percentile(exact_sorted, 99)
            )
        counts = self.counts
        if exact_sorted:
            counts = counts + np.bincount(
                _bin_of(np.asarray(exact_sorted, dtype=np.float64)), minlength=BINS
            )
        total = self.n + len(exact_sorted)
        cum = np.cumsum(counts)

        def at(rank: int) -> float:  # the value of the rank-th smallest duration (0-based)
            return _value_of(int(np.searchsorted(cum, rank + 1)))

        def q(p: float) -> float:  # interpolated between ranks, as ``percentile`` does
            pos = (total - 1) * p / 100.0
            lo = int(pos)
            hi = min(lo + 1, total - 1)
            a = at(lo)
            return a + (at(hi) - a) * (pos - lo)

        return total, Latency(q(50), q(95), q(99))
