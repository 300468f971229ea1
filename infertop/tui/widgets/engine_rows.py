"""The stage panel's engine rows (an LLM engine among the processes: analysis/engine.py): the
steps and their time on one row, the scheduler's state as the engine's own metrics saw it on
the next (requests running and waiting, the KV cache's usage, preemptions, tokens a second),
the same numbers as ``report.engine`` at the same moment."""

from __future__ import annotations

from rich.text import Text

from infertop.analysis.engine import EngineSummary
from infertop.config import FindingThresholds
from infertop.tui.palette import stage_color

KV_FULL = FindingThresholds().kv_usage_share  # the usage shown in red, as the finding's


def engine_rows(e: EngineSummary | None, name_w: int) -> list[Text]:
    if e is None:
        return []
    head = Text(no_wrap=True, overflow="ellipsis")
    head.append(f"engine ({e.kind})".ljust(name_w), style=f"bold {stage_color('forward')}")
    parts = [f"{e.steps_per_s:.0f} steps/s"]
    if e.step_ms is not None:
        parts.append(f"step p50 {e.step_ms[0]:.1f} p99 {e.step_ms[1]:.1f} ms")
    if (out := e.outside_forward) is not None:
        parts.append(f"worker {out:.0%} outside the forward")
    head.append("  ".join(parts), style="bold")
    rows = [head]
    sc = e.scheduler
    if sc is not None:
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append("  scheduler".ljust(name_w), style="dim")
        run, wait, kv = sc.running, sc.waiting, sc.kv_usage
        line.append(f"running {run[0]:g} (max {run[1]})  waiting {wait[0]:g} (max {wait[1]})  ")
        full = kv[1] >= KV_FULL or sc.preemptions > 0  # as kv-cache-headroom judges an engine's
        line.append(f"KV {kv[0]:.0%} (max {kv[1]:.0%})", style="bold red" if full else "")
        if sc.preemptions:
            line.append(f"  {sc.preemptions} preempted", style="bold red")
        if sc.seconds > 0:
            line.append(
                f"  {sc.prompt_tokens / sc.seconds:.0f} prompt + "
                f"{sc.generation_tokens / sc.seconds:.0f} generated tok/s",
                style="dim",
            )
        rows.append(line)
    elif e.running is not None:
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append("  batch".ljust(name_w), style="dim")
        line.append(f"requests a step p50 {e.running[0]:g} (max {e.running[1]})")
        rows.append(line)
    return rows
