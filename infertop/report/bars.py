"""Horizontal bars in eighths of a cell, for text: the UI's panels and ``diff --flame`` draw
the same ones. No imports: the UI loads it at start-up."""

from __future__ import annotations

_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(fraction: float, width: int) -> tuple[str, str]:
    """A horizontal bar ``width`` cells wide as (filled part, empty part), in eighths of a cell."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (_EIGHTHS[part] if part and full < width else "")
    return filled, " " * (width - len(filled))
