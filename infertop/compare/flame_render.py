"""``diff --flame``: the new profile's call tree as text, each frame's share against the base.

Bars are the new profile's shares; the change is in points of the whole, red when a frame
grew (more of the time: slower), blue when it shrank, as a differential flame graph colours.
"""

from __future__ import annotations

from typing import Any

from infertop.analysis.flame import FlameNode
from infertop.analysis.flame_diff import STEADY, BaseShares, diff_rows, gone_frames
from infertop.report.bars import bar

BAR_W = 10
RED, BLUE, DIM, RESET = "\x1b[31m", "\x1b[34m", "\x1b[2m", "\x1b[0m"


def _bar(share: float) -> str:
    return "".join(bar(share, BAR_W))


def _change(change: float, base: float, colour: bool) -> str:
    if base == 0:
        text, code = "   new", RED
    elif abs(change) < STEADY:
        text, code = "     ·", DIM
    else:
        text, code = f"{change * 100:+6.1f}", RED if change > 0 else BLUE
    return f"{code}{text}{RESET}" if colour else text


def render_flame_diff(
    new: FlameNode, base: FlameNode, base_path: str, new_path: str,
    *, colour: bool = False, min_share: float = 0.01, max_rows: int = 80,
) -> str:  # fmt: skip
    shares = BaseShares(base)
    rows = diff_rows(new, shares, min_share)
    out = [
        f"infertop diff --flame — base {base_path} vs new {new_path}",
        "bars: share of the new profile; change: points of the whole against the base at the "
        "same call path (+ grew: slower, - shrank); lines of a function merged",
        "",
        f"  {'new':<{BAR_W}}  share  change  frame",
    ]
    for r in rows[:max_rows]:
        indent = "·" * min(r.depth, 24)
        where = r.frame.short_file
        out.append(
            f"  {_bar(r.new_share)} {r.new_share * 100:5.1f}%  {_change(r.change, r.base_share, colour)}"
            f"  {indent}{r.frame.function}  {where}"
        )
    if len(rows) > max_rows:
        out.append(f"  … {len(rows) - max_rows} more frames (of at least {min_share:.0%})")
    gone = gone_frames(new, shares, min_share)
    if gone:
        out += ["", "gone (in the base, never reached in the new profile):"]
        for path, share in gone:
            fn, file = path[-1]
            caller = f"  (under {path[-2][0]})" if len(path) > 1 else ""
            out.append(f"  {share * 100:5.1f}%  {fn}  {file}{caller}")
    if not rows:
        out.append("  (no Python samples in the new profile)")
    return "\n".join(out) + "\n"


def flame_diff_json(new: FlameNode, base: FlameNode, min_share: float = 0.01) -> dict[str, Any]:
    shares = BaseShares(base)
    return {
        "frames": [
            {
                "depth": r.depth,
                "function": r.frame.function,
                "file": r.frame.file,
                "new_share": round(r.new_share, 6),
                "base_share": round(r.base_share, 6),
                "change": round(r.change, 6),
            }
            for r in diff_rows(new, shares, min_share)
        ],  # fmt: skip
        "gone": [
            {"path": [f"{fn} ({file})" for fn, file in p], "base_share": round(s, 6)}
            for p, s in gone_frames(new, shares, min_share)
        ],
    }
