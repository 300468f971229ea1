"""The stage panel: where the last few seconds went, stage by stage, with a short history;
under the stages, the agent's GC pauses and event-loop lag on the same time axis
(``pause_rows.py``)."""

from __future__ import annotations

import re
import textwrap

from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from infertop.analysis.requests import RequestSummary
from infertop.analysis.shares import StageShare
from infertop.analysis.snapshot import Snapshot
from infertop.analysis.stages import IDLE
from infertop.analysis.untimed import untimed_stages
from infertop.tui.palette import bar, sparkline, stage_color
from infertop.tui.widgets.engine_rows import engine_rows
from infertop.tui.widgets.generation_rows import batch_row, generation_rows
from infertop.tui.widgets.pause_rows import pause_rows

NAME_W = 12  # "postprocess "
PCT_W = 7  # "  45.2%"
TOTAL_W = 9  # "   40.1%" (the session column)
#: the idle row's words in place of its bar: its share is of a larger whole than the stages'
#: (all thread time), so the stages above sum to 100 % without it; the longest that fits
IDLE_NOTES = ("not in the 100 % above", "not in the 100 %", "not in 100 %")
#: a work stage's latency cell without a timed call (the ``latency`` row under says why)
NO_CALLS = "no timed calls"


def stage_history(history: tuple[dict[str, int], ...], stage: str) -> list[float]:
    """Per window, the stage's share: of active samples (idle: of all samples)."""
    out: list[float] = []
    for counts in history:
        active = sum(n for s, n in counts.items() if s != IDLE)
        denom = active + counts.get(IDLE, 0) if stage == IDLE else active
        out.append(counts.get(stage, 0) / denom if denom else 0.0)
    return out


def _latency_text(share: StageShare) -> str:
    lat = share.latency_ms
    if lat is None:
        return ""
    rate = f"  {share.calls_per_s:.1f}/s" if share.calls_per_s is not None else ""
    return f"p50 {lat.p50:.1f} p99 {lat.p99:.1f} ms{rate}"


def layout_widths(width: int, latency_w: int) -> tuple[int, int]:
    """(bar width, sparkline width) for a panel ``width`` cells wide."""
    fixed = NAME_W + PCT_W + TOTAL_W + 2 + (latency_w + 2 if latency_w else 0)
    free = max(0, width - fixed)
    bar_w = min(30, max(6, free * 2 // 5))
    spark_w = min(60, free - bar_w)
    return bar_w, spark_w if spark_w >= 4 else 0


def stage_columns(snapshot: Snapshot, width: int) -> tuple[int, int, int]:
    """(bar, history sparkline, latency) widths of the panel; the GPU panel uses the same
    columns so its history lines up with the stages' second by second."""
    latency_w = max((len(_latency_text(s)) for s in snapshot.recent), default=0)
    if width < NAME_W + PCT_W + TOTAL_W + latency_w + 20:
        latency_w = 0  # too narrow: shares and history matter more
    bar_w, spark_w = layout_widths(width, latency_w)
    return bar_w, spark_w, latency_w


def render_stages(snapshot: Snapshot | None, width: int, header: bool = True) -> Text:
    """The panel's text for ``snapshot`` at ``width`` cells."""
    if snapshot is None or not snapshot.recent:
        return Text("waiting for samples…", style="dim italic")
    totals = {s.name: s for s in snapshot.totals}
    bar_w, spark_w, latency_w = stage_columns(snapshot, width)
    with_latency = latency_w > 0
    gap = untimed_stages(snapshot)  # work stages without a timed call: why, what to do
    lines: list[Text] = []
    if header:
        head = Text(style="bold #bcbcbc on #262626", no_wrap=True, overflow="ellipsis")
        view = "wall" if snapshot.view == "wall" else "cpu"  # key c switches
        head.append("stage".ljust(NAME_W) + f"{view} · last 5 s"[:bar_w].ljust(bar_w))
        head.append("share".rjust(PCT_W) + "session".rjust(TOTAL_W))
        if spark_w:
            head.append("  " + ("history" if spark_w >= 7 else "").ljust(spark_w))
        if with_latency:
            head.append("  latency")
        head.append(" " * max(0, width - len(head)))
        lines.append(head)
    for share in snapshot.recent:
        color = stage_color(share.name)
        idle = share.name == IDLE
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append(share.name[: NAME_W - 1].ljust(NAME_W), style=color if idle else f"bold {color}")
        note = next((n for n in IDLE_NOTES if len(n) < bar_w), None) if idle else None
        if note is not None:
            row.append(note.ljust(bar_w), style="dim italic")
        else:
            filled, empty = bar(share.share, bar_w)
            row.append(filled, style=color)
            row.append(empty, style="on #303030")
        row.append(f"{share.share * 100:.1f}%".rjust(PCT_W), style="bold" if not idle else "")
        total = totals.get(share.name)
        total_text = f"{total.share * 100:.1f}%" if total is not None else "-"
        row.append(total_text.rjust(TOTAL_W), style="dim")
        if spark_w:
            row.append("  " + sparkline(stage_history(snapshot.history, share.name), spark_w))
            row.stylize(color, len(row) - spark_w)
        if with_latency:
            if share.latency_ms is None and gap is not None and share.name in gap.stages:
                row.append("  " + NO_CALLS, style="dim italic")
            else:
                row.append("  " + _latency_text(share))
        lines.append(row)
    if gap is not None:
        lines += latency_rows(gap.line(short=True), width)
    if snapshot.recent_requests is not None:
        lines.append(requests_row(snapshot.recent_requests))
    lines += generation_rows(snapshot.generation, NAME_W)
    lines += engine_rows(snapshot.engine, NAME_W)
    for stage, calls in snapshot.batches.items():  # a stage's calls by batch size (forward)
        rows = [(b.batch, b.calls, b.latency_ms_p50) for b in calls]
        by_batch = batch_row("  by batch", rows, NAME_W, f"{stage} calls")
        if by_batch is not None:
            lines.append(by_batch)
    lines += pause_rows(snapshot, NAME_W, bar_w + PCT_W + TOTAL_W, spark_w)
    return Text("\n").join(lines)


def latency_rows(why: str, width: int) -> list[Text]:
    """``latency     preprocess: no timed calls on Python 3.11.7, WHY. TODO``: the stages with
    no latency, why, and the one thing to do; on up to three rows where one is too narrow for
    it (the thing to do comes last, and must be seen)."""
    room = max(20, width - NAME_W)
    # a command line is not split: its words are kept together (a no-break space)
    words = re.sub(r"--\S+ ('[^']*'|\S+)", lambda m: m[0].replace(" ", "\u00a0"), why)
    parts = [p.replace("\u00a0", " ") for p in textwrap.wrap(words, room)]
    if len(parts) > 3:
        parts = parts[:2] + [textwrap.shorten(" ".join(parts[2:]), room, placeholder="…")]
    rows = []
    for i, part in enumerate(parts):
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append(("latency" if i == 0 else "").ljust(NAME_W), style="bold #d7af5f")
        row.append(part, style="#d7af5f")
        rows.append(row)
    return rows


def requests_row(req: RequestSummary) -> Text:
    """``requests    12.4/s  p50 27.0  p95 31.2  p99 40.1 ms  · preprocess 5.5  forward 20.1 …``:
    the last seconds' requests (the agent's ASGI requests, the application's ids), and where a
    request's time went (p50 ms by stage) when its calls were joined."""
    row = Text(no_wrap=True, overflow="ellipsis")
    row.append("requests".ljust(NAME_W), style=f"bold {stage_color('request')}")
    lat = req.latency_ms
    rate = f"{req.per_s:.1f}/s  " if req.per_s is not None else ""
    row.append(f"{rate}p50 {lat.p50:.1f}  p95 {lat.p95:.1f}  p99 {lat.p99:.1f} ms", style="bold")
    if req.breakdown_ms:
        row.append("  · " + "  ".join(f"{st} {p50:.1f}" for st, p50, _ in req.breakdown_ms), style="dim")
    return row


class StagePanel(Widget):
    """One row per stage seen in the last 5 s: bar, share, session share, history, latency;
    then the requests' row, the generation calls' rows, and a row for GC pauses and one for
    event-loop lag when there are any."""

    DEFAULT_CSS = """
    StagePanel { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.border_title = "stages"

    def show(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.refresh(layout=True)

    def render(self) -> Text:
        return render_stages(self.snapshot, self.content_region.width or 80)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # at the width it will have: the latency row wraps to as many rows as it needs there
        return len(render_stages(self.snapshot, width).split("\n"))
