"""The stage panel's generation rows (the agent's generation calls; docs/generation.md): time to
first token and per output token, tokens per second and the KV cache on one row, and the calls'
latency by batch size on the next, against the smallest batch's, so that "8 requests take 1.5×
as long as 2, not 4×" reads at a glance; the same batch row for a stage's calls (forward)."""

from __future__ import annotations

from rich.text import Text

from infertop.analysis.generation import GenerationSummary
from infertop.report.generation import mib
from infertop.tui.palette import stage_color

#: batch sizes shown on the batch row, at most (the most frequent ones)
MAX_BATCHES = 6


def generation_rows(g: GenerationSummary | None, name_w: int) -> list[Text]:
    if g is None:
        return []
    head = Text(no_wrap=True, overflow="ellipsis")
    head.append("generation".ljust(name_w), style=f"bold {stage_color('decode')}")
    parts = [f"{g.calls} calls"]
    if g.ttft_ms is not None:
        parts.append(f"TTFT p50 {g.ttft_ms.p50:.1f} p99 {g.ttft_ms.p99:.1f} ms")
    if g.tpot_ms is not None:
        parts.append(f"TPOT p50 {g.tpot_ms.p50:.2f} ms")
    if g.tokens_per_s is not None:
        parts.append(f"{g.tokens_per_s:.0f} tok/s")
    head.append("  ".join(parts), style="bold")
    if g.kv_cache is not None:
        kv = g.kv_cache
        room = f", {mib(kv.headroom_bytes)} free" if kv.headroom_bytes is not None else ""
        head.append(f"  · KV max {mib(kv.bytes_max)} ({kv.device}{room})", style="dim")
    rows = [head]
    batch = batch_row(
        "  by batch", [(b.batch, b.calls, b.latency_ms_p50) for b in g.by_batch], name_w
    )
    return rows + ([batch] if batch is not None else [])


def batch_row(
    label: str, rows: list[tuple[int, int, float]], name_w: int, what: str = ""
) -> Text | None:
    """``label  [what · ]2: 40× 107 ms   8: 26× 163 ms (1.5× of 2)``: calls by batch size (batch,
    calls, p50 ms), the six most frequent sizes, each against the smallest's latency; None: no
    rows."""
    if not rows:
        return None
    shown = sorted(sorted(rows, key=lambda r: -r[1])[:MAX_BATCHES])
    base_batch, _, base_ms = shown[0]
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(label.ljust(name_w), style="dim")
    if what:
        line.append(what + " · ", style="dim")
    cells = []
    for batch, calls, ms in shown:
        cell = f"{batch}: {calls}× {ms:.0f} ms"
        if batch != base_batch and base_ms > 0:
            cell += f" ({ms / base_ms:.1f}× of {base_batch})"
        cells.append(cell)
    line.append("   ".join(cells))
    return line
