"""The tail view's text (key l), without Textual: for one stage, its slow-call threshold and
counts, the frames its slow calls spend more of their samples in than its typical calls do,
the slowest calls, what the slow calls overlapped, and — when there are no call samples —
why, and what to do. ``screens/tail.py`` lays these out above the differential flame."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from infertop.analysis.snapshot import Snapshot
from infertop.analysis.tail import OVERLAPS, StageTail
from infertop.analysis.untimed import untimed_stages
from infertop.config import STAGES
from infertop.model.events import Frame
from infertop.tui.palette import bar, stage_color

HEAD = "bold #5fafff"
MORE = "#f01e1e"  # the differential flame's "grew most" red: what the slow calls have more of
#: what each overlap is, as the view names it (``tail.OVERLAPS``)
OVERLAP_LABELS = {
    "gc": "garbage collection",
    "gil": "GIL held elsewhere",
    "queue": "waiting in a queue",
    "sync": "host-device syncs",
    "profiler": "our own profiler windows",
    "memory": "memory pressure",  # major faults, stalls: host memory readings
}
LABEL_W = max(len(v) for v in OVERLAP_LABELS.values())
NUMBERS_W = 18  # "  94.1%     0.0%  ": slow and typical share
SIDE_BY_SIDE = 72  # cells: from this wide, the slowest calls and the overlaps share rows
CALLS_W = 34  # the slowest calls' column when side by side


def stage_order(tails: Sequence[StageTail]) -> list[str]:
    """The stages with a tail: the known ones in pipeline order, then the user's by name."""
    names = [t.stage for t in tails]
    return [s for s in STAGES if s in names] + sorted(s for s in names if s not in STAGES)


def default_stage(tails: Sequence[StageTail], stage_filter: str | None) -> str | None:
    """The stage the flame is filtered to when it has a tail, else the one with most calls."""
    if any(t.stage == stage_filter for t in tails):
        return stage_filter
    if not tails:
        return None
    return max(tails, key=lambda t: (t.calls, t.stage)).stage


TODO = (
    'time the stage\'s calls with --stage STAGE=FUNCTION or wrap them in '
    '`with infertop.stage("STAGE"):`'
)


def _why_no_samples(snap: Snapshot) -> tuple[str, str]:
    """(why the agent sent no call samples, what to do)."""
    agent = next((s for s in snap.statuses if s.collector == "agent"), None)
    ran = agent is not None and "profiler" in agent.message  # no windows, calls all the same
    if agent is None or (agent.state in ("unavailable", "failed") and not ran):
        why = "the in-process agent did not run"
        if agent is not None and agent.message:
            why += f" ({agent.message})"
        return why, "attach with the agent, and " + TODO
    # the agent times the same calls on every Python it runs on (wrappers before 3.12)
    on = f" on Python {snap.target.python}" if snap.target.python else ""
    return f"the agent's call sampler saw no stage calls{on}", TODO


def no_samples_line(snap: Snapshot) -> str | None:
    """Why the agent sent no call samples and what to do, in one line; None when it did (or
    when the tails are not computed yet)."""
    view = snap.ui.tail_view
    if view is None or view.call_samples:
        return None
    why, todo = _why_no_samples(snap)
    return f"No call samples: {why}. To explain slow calls, {todo}."


def no_calls_line(snap: Snapshot) -> str:
    """The view's one line when no stage call was timed at all (no tail to show): which
    stages, on which Python, why, and the one thing to do."""
    gap = untimed_stages(snap)
    if gap is not None:
        return f"No timed stage calls, so no tail. {gap.line()}"
    view = snap.ui.tail_view
    if view is not None and view.call_samples:
        return "No timed stage calls yet, so no tail: " + TODO + "."
    why, todo = _why_no_samples(snap)
    return f"No timed stage calls, so no tail: {why}. To explain slow calls, {todo}."


def counts_lines(tail: StageTail, rate_hz: float = 0.0) -> list[Text]:
    """``preprocess · 851 calls: 9 slow ≥ 40.2 ms (p99), 427 typical ≤ 5.2 ms (p50)``
    (``given`` for a ``--slow`` threshold) and the samples each side has."""
    line = Text()
    line.append(tail.stage, style=f"bold {stage_color(tail.stage)}")
    how = "given" if tail.threshold_given else "p99"
    line.append(f" · {tail.calls:,} calls: ")
    line.append(f"{tail.slow_calls:,} slow ≥ {tail.threshold_ms:.1f} ms ({how})", style="bold")
    line.append(f", {tail.typical_calls:,} typical ≤ {tail.p50_ms:.1f} ms (p50)")
    out = [line]
    if tail.slow_samples or tail.typical_samples:
        rate = f" at {rate_hz:g} Hz" if rate_hz else ""
        out.append(
            Text(
                f"call samples{rate}: {tail.slow_samples:,} in the slow calls, "
                f"{tail.typical_samples:,} in the typical ones",
                style="dim",
            )
        )
    return out


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def frame_lines(tail: StageTail, width: int, limit: int = 10) -> list[Text]:
    """The frames the slow calls' samples hold more often than the typical calls' do, by
    how much more: ``function  file:line   slow%  typical%  bar`` (the bar: the difference)."""
    head = Text("frames the slow calls have more of", style=HEAD)
    if not tail.slow_samples:
        return [head, Text("  no call samples fell inside the slow calls", style="dim")]
    if not tail.frames:
        return [
            head,
            Text(
                "  none: the slow calls ran the code typical calls run, only longer (see what "
                "they overlapped)",
                style="dim",
            ),
        ]
    bar_w = 10 if width >= 70 else 5
    room = min(72, max(8, width - 4 - NUMBERS_W - bar_w))  # the function and its file:line
    head.append(" " * max(1, room + 4 - len(head)) + f"{'slow':>7} {'typical':>8}", style="dim")
    out = [head]
    for f in tail.frames[:limit]:
        name = _cut(f.function, room)
        where = _cut(f"  {Frame(f.function, f.file, f.line).short_file}:{f.line}", room - len(name))
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append("  " + name, style="bold")
        row.append(where, style="#8a8a8a")
        row.append(" " * (2 + room - len(name) - len(where)))
        row.append(f"{f.slow_share:7.1%} {f.typical_share:8.1%}  ")
        filled, empty = bar(f.excess, bar_w)
        row.append(filled, style=MORE)
        row.append(empty, style="on #303030")
        out.append(row)
    if len(tail.frames) > limit:
        out.append(Text(f"  … {len(tail.frames) - limit} more", style="dim"))
    return out


def _at(seconds: float) -> str:
    """``m:ss.ss`` from the session's start."""
    m, s = divmod(max(0.0, seconds), 60.0)
    return f"{int(m)}:{s:05.2f}"


def slowest_lines(
    tail: StageTail, t_first: float, names: dict[int, str], width: int, limit: int = 10
) -> list[Text]:
    """The slowest calls: start (from the session's start), duration, thread."""
    out = [Text("slowest calls", style=HEAD)]
    if not tail.slowest:
        out.append(Text("  none", style="dim"))
    for c in tail.slowest[:limit]:
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append(f"  at {_at(c.t - t_first)}", style="dim")
        row.append(f"{c.duration_ms:8.1f} ms", style="bold")
        row.append("  " + _cut(names.get(c.tid) or f"thread {c.tid}", max(4, width - 24)))
        out.append(row)
    shown = min(limit, len(tail.slowest))
    if tail.slow_calls > shown:
        out.append(Text(f"  … {tail.slow_calls - shown} more", style="dim"))
    return out


def overlap_lines(tail: StageTail) -> list[Text]:
    """What the slow calls overlapped, as shares of their time; ``not measured`` where the
    session cannot say (no call sampler: the GIL, queue and sync shares)."""
    out = [Text("overlapped", style=HEAD)]
    out[0].append(" (share of slow-call time)", style="dim")
    for key in OVERLAPS:
        share = tail.overlaps.get(key)
        if key == "memory" and share is None:
            continue  # no host memory read (a recording made before format 1.8)
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append(f"  {OVERLAP_LABELS[key]:<{LABEL_W}} ")
        if share is None:
            row.append("not measured", style="dim italic")
        else:
            row.append(f"{share:6.1%} ", style="bold" if share >= 0.005 else "")
            filled, _ = bar(share, 5)
            row.append(filled, style=MORE)
        out.append(row)
    return out


def side_by_side(left: list[Text], right: list[Text], left_w: int) -> list[Text]:
    """Two columns of lines, the left one padded to ``left_w`` cells."""
    out = []
    for i in range(max(len(left), len(right))):
        row = Text(no_wrap=True, overflow="ellipsis")
        a = left[i].copy() if i < len(left) else Text()
        a.truncate(left_w, overflow="ellipsis", pad=True)
        row.append_text(a)
        if i < len(right):
            row.append("  ")
            row.append_text(right[i])
        out.append(row)
    return out


def generation_lines(snap: Snapshot, limit: int = 5) -> list[Text]:
    """For prefill and decode: the slowest generation calls, each with its queue wait, prefill,
    decode, batch and tokens, and the part that made it slow (docs/generation.md)."""
    g = snap.generation
    if g is None or not g.slowest:
        return []
    out = [Text("slowest generation calls (queue · prefill · decode ms)", style=HEAD)]
    for c in g.slowest[:limit]:
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append(f"  at {_at(c.t - snap.t_first)}", style="dim")
        row.append(f"{c.duration_ms:8.1f} ms", style="bold")
        parts = [f"{ms:.1f}" if ms is not None else "-" for ms in (c.queue_ms, c.prefill_ms, c.decode_ms)]
        row.append("  " + " · ".join(parts))
        row.append(f"  batch {c.batch}, prompt {c.prompt_tokens}, new {c.new_tokens}", style="dim")
        if c.why:
            row.append(f"  mostly {c.why}", style=f"bold {MORE}")
        out.append(row)
    return out


def tail_text(snap: Snapshot, tail: StageTail, width: int, short: bool = False) -> Text:
    """Everything above the flame for ``tail``'s stage, ``width`` cells wide; ``short``: a
    low screen (at most 5 slowest calls and frames)."""
    view = snap.ui.tail_view
    limit = 5 if short else 10
    lines = counts_lines(tail, view.rate_hz if view is not None else 0.0)
    gap = untimed_stages(snap)
    if gap is not None:  # the stages the view cannot show: no tail for them, and why
        lines.append(Text("not here: " + gap.line(short=short), style="#d7af5f"))
    missing = no_samples_line(snap)
    lines.append(Text())
    if missing is not None:
        lines.append(Text(missing, style="#d7af5f"))
    else:
        lines += frame_lines(tail, width, limit)
    lines.append(Text())
    names = view.thread_names if view is not None else {}
    if width >= SIDE_BY_SIDE:
        calls_w = max(CALLS_W, min(48, width - LABEL_W - 17))
        lines += side_by_side(
            slowest_lines(tail, snap.t_first, names, calls_w, limit), overlap_lines(tail), calls_w
        )
    else:
        lines += slowest_lines(tail, snap.t_first, names, width, limit)
        lines += overlap_lines(tail)
    if tail.stage in ("prefill", "decode") and snap.generation is not None:
        lines += [Text()] + generation_lines(snap, 3 if short else 5)
    return Text("\n").join(lines)
