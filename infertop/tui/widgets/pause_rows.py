"""The stage panel's pause rows, under the stages: garbage collections and event-loop lag on
the panel's own time axis (one cell per history window, as the stages' history), with the
session's totals where the stages have their shares. A row is there only when the agent saw
such pauses."""

from __future__ import annotations

from rich.text import Text

from infertop.analysis.pauses import GcSummary, LoopLagSummary
from infertop.analysis.snapshot import Snapshot
from infertop.tui.palette import GC_COLOR, LAG_COLOR, sparkline

#: a heartbeat this late is drawn; under it the loop kept up (the row stays blank there)
LAG_SHOWN_MS = 1.0


def _fit(candidates: list[str], width: int) -> str:
    """The first (longest) of ``candidates`` that fits ``width`` cells, else the last cut."""
    for text in candidates:
        if len(text) <= width:
            return text
    return candidates[-1][:width]


def gc_totals(gc: GcSummary, width: int) -> str:
    """``29× 585 ms, max 35 ms, 3.9% of wall``, shortened to fit."""
    n, total, top = f"{gc.count}×", f"{gc.total_ms:.0f} ms", f"{gc.max_ms:.0f} ms"
    return _fit(
        [
            f"{n} {total}, max {top}, {gc.share:.1%} of wall",
            f"{n} {total}, max {top}",
            f"{n} {total} max {top}",
            f"{n} {total}",
        ],
        width,
    )


def lag_totals(lag: LoopLagSummary, width: int) -> str:
    """``p99 66 ms, max 77 ms (2 loops)``, shortened to fit."""
    p99, top = f"{lag.p99_ms:.0f} ms", f"{lag.max_ms:.0f} ms"
    loops = f" ({lag.loops} loops)" if lag.loops > 1 else ""
    return _fit(
        [
            f"p99 {p99}, max {top}{loops}",
            f"p99 {p99}, max {top}",
            f"p99 {p99} max {top}",
            f"p99 {p99}",
        ],
        width,
    )


def scaled(values: tuple[float, ...], floor: float = 0.0) -> list[float]:
    """Each window's value against the largest one (0..1); values under ``floor``: 0 (blank)."""
    kept = [v if v >= floor else 0.0 for v in values]
    top = max(kept, default=0.0)
    return [v / top if top > 0 else 0.0 for v in kept]


def pause_rows(snapshot: Snapshot, name_w: int, totals_w: int, spark_w: int) -> list[Text]:
    """The ``gc`` and ``loop lag`` rows: name (``name_w``), the session's totals (``totals_w``:
    the stages' bar, share and session columns), and per window of the history (``spark_w``
    cells, right-aligned as the stages' are) the GC pause time, or the worst lag, drawn
    against the busiest window."""
    pauses, history = snapshot.pauses, snapshot.pause_history
    if pauses is None:
        return []
    rows: list[Text] = []
    gc_ms = history.gc_ms if history else ()
    lag_ms = history.lag_ms if history else ()
    gc, lag = pauses.gc, pauses.event_loop
    series = [
        ("gc", GC_COLOR, None if gc is None else gc_totals(gc, totals_w), gc_ms, 0.0),
        ("loop lag", LAG_COLOR, None if lag is None else lag_totals(lag, totals_w), lag_ms,
         LAG_SHOWN_MS),
    ]  # fmt: skip
    for name, color, totals, values, floor in series:
        if totals is None:
            continue
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append(name.ljust(name_w), style=f"bold {color}")
        row.append(totals.ljust(totals_w), style="dim")
        if spark_w:
            row.append("  " + sparkline(scaled(values, floor), spark_w), style=color)
        rows.append(row)
    return rows
