"""Stage colours, the same in every view, and small text helpers shared by the widgets."""

from __future__ import annotations

import zlib

from infertop.report.bars import bar as bar  # re-exported: diff --flame draws the same bars

#: One fixed colour per built-in stage (readable on dark and light terminals).
STAGE_COLORS: dict[str, str] = {
    "preprocess": "#5fafff",
    "ipc": "#ffaf00",
    "queue": "#d7af5f",
    "forward": "#87d75f",
    "prefill": "#afd700",
    "decode": "#5faf5f",
    "sync": "#ff6f6f",
    "postprocess": "#c39bff",
    "serialize": "#5fd7d7",
    "other": "#a8a8a8",
    "idle": "#6c6c6c",
}

#: The stage panel's pause rows: garbage collections and event-loop lag (apart from any stage).
GC_COLOR = "#ff875f"
LAG_COLOR = "#d7afd7"

#: Colours for user-defined stages, picked by a stable hash of the name.
_FALLBACK = ("#ff87d7", "#e0e070", "#ffaf87", "#87d7af", "#d7875f", "#8fa8ff")

_SPARK = "▁▂▃▄▅▆▇█"


def stage_color(stage: str) -> str:
    """The colour of ``stage``; user stages get a fixed colour from their name."""
    known = STAGE_COLORS.get(stage)
    if known is not None:
        return known
    return _FALLBACK[zlib.crc32(stage.encode()) % len(_FALLBACK)]


def text_on(background: str) -> str:
    """A text colour readable on ``background`` (``#rrggbb``): near-black on the light stage
    colours, near-white on dark ones (WCAG relative luminance)."""

    def channel(hex2: str) -> float:
        c = int(hex2, 16) / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(background[i : i + 2]) for i in (1, 3, 5))
    return "#121212" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.18 else "#f0f0f0"


def sparkline(values: list[float], width: int) -> str:
    """The last ``width`` values (each 0..1) as block characters; exact zeros are blank."""
    out = []
    for v in values[-width:] if width > 0 else []:
        if v <= 0:
            out.append(" ")
        else:
            out.append(_SPARK[min(len(_SPARK) - 1, int(min(v, 1.0) * len(_SPARK)))])
    return "".join(out).rjust(max(width, 0))


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def clock(seconds: float) -> str:
    """``m:ss.s`` (or ``h:mm:ss`` past an hour)."""
    seconds = round(max(0.0, seconds), 1)
    if seconds >= 3600:
        h, rest = divmod(int(seconds), 3600)
        return f"{h}:{rest // 60:02d}:{rest % 60:02d}"
    m, s = divmod(seconds, 60)
    return f"{int(m)}:{s:04.1f}"


#: the differential flame (replay --base): grew is red, shrank is blue, by how many points of
#: the whole; steady (under half a point) grey
_GREW = ("#6e4a4a", "#9c4040", "#c83232", "#f01e1e")
_SHRANK = ("#4a566e", "#40609c", "#3264c8", "#1e64f0")


def diff_color(change: float) -> str:
    """The colour of a frame that grew (``change`` > 0) or shrank by ``change`` of the whole."""
    size = abs(change)
    if size < 0.005:
        return "#6c6c6c"
    step = 0 if size < 0.02 else 1 if size < 0.05 else 2 if size < 0.10 else 3
    return (_GREW if change > 0 else _SHRANK)[step]
