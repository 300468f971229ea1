"""GC pause time and event-loop lag per window of the stage history, for the stage panel's
pause rows: the same windows as ``Snapshot.history`` (bucketed as the GPU panel's series are,
``gpu_series.buckets_for``), so a pause sits under the stage it interrupted."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infertop.analysis.gpu_series import buckets_for
from infertop.model.events import GcPause, LoopLag


@dataclass(frozen=True)
class PauseHistory:
    """Per window of the stage history (oldest first, as ``Snapshot.history``): the time
    spent in garbage collections (ms of pause inside the window) and the worst event-loop lag
    of a heartbeat scheduled in it (ms; 0: none, or no loop)."""

    gc_ms: tuple[float, ...]
    lag_ms: tuple[float, ...]


def pause_history(
    gc: Sequence[GcPause],
    lags: Sequence[LoopLag],
    windows: Sequence[tuple[float, float]],
    keep: Callable[[int], bool] | None = None,
) -> PauseHistory | None:
    """The series over ``windows`` ((start, end) of each history window); None without
    windows or when no pause and no heartbeat falls in them. ``keep``: which processes'
    events count (by their ``pid``; None: all)."""
    if not windows:
        return None
    buckets = buckets_for(windows, 0.0, len(windows))
    starts = [b[0] for b in buckets]
    gc_ms = [0.0] * len(buckets)
    lag_ms = [0.0] * len(buckets)
    seen = False
    for p in gc:
        if keep is not None and not keep(p.pid):
            continue
        if p.t_end <= starts[0] or p.t_start >= buckets[-1][1]:
            continue
        i = max(0, bisect.bisect_right(starts, p.t_start) - 1)
        while i < len(buckets) and buckets[i][0] < p.t_end:
            a, b = max(p.t_start, buckets[i][0]), min(p.t_end, buckets[i][1])
            if b > a:
                gc_ms[i] += (b - a) * 1000.0
                seen = True
            i += 1
    for x in lags:
        if keep is not None and not keep(x.pid):
            continue
        if x.t < starts[0] or x.t > buckets[-1][1]:
            continue
        i = max(0, bisect.bisect_right(starts, x.t) - 1)
        lag_ms[i] = max(lag_ms[i], x.lag_s * 1000.0)
        seen = True
    if not seen:
        return None
    return PauseHistory(tuple(gc_ms), tuple(lag_ms))
