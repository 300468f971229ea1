"""The help screen: every key, what it does, and how to read the views. Escape closes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from infertop.config import STAGES
from infertop.tui.palette import stage_color

READING = (
    "Stage panel: each stage's share of active (non-idle) samples over the last 5 s, "
    "its share over the whole session, and its history (one cell per sample window). "
    "The stages sum to 100 %; idle is not one of them (its bar says \"not in the 100 %\"): its "
    "share is of all thread time (wall view: the pipeline threads waiting outside every "
    "stage). Under the stages, when the agent saw them: gc, the "
    "session's garbage collections (count, pause time, longest) and each window's pause time; "
    "loop lag, how late an asyncio event loop ran its heartbeat (p99, max) and each window's "
    "worst (both against their busiest window).\n"
    "Flame: an icicle graph: the root on top, one row per call depth, each frame a bar as "
    "wide as its share of the zoomed frame, in its stage's colour, its callees under it in "
    "name order (so bars stay put as the counts change); frames narrower than a cell are left "
    "out (grey: several merged). Under it, the selected frame: where it is, its total and self "
    "share of all samples shown (under the stage filter) and of the zoomed frame, its stage. "
    "↑ caller, ↓ callee, ← → along the row, enter zooms, esc back; in a replay , and . seek "
    "(the flame has the arrows). t: the indented list instead (total% / self%, the bar is the "
    "share of the zoomed frame, frames under 0.5% hidden); both keep the zoom and the "
    "selection. /: search (a substring or a glob, of function or file); the matches keep their "
    "colour, the rest dims, the header gives their share with each stack counted once.\n"
    "o switches the lower panel. Torch-ops flame: torch ops → child ops → the kernels and "
    "copies they launched, weighted in µs (an op's CPU self time, a kernel's GPU time) over "
    "the agent's torch.profiler windows. Ops table: each op or kernel per stage, by self time. "
    "The stage filter (s) applies to all three.\n"
    "i opens the findings: the bottleneck rules that fire on what has been seen so far "
    "(docs/findings.md), worst first, recomputed with every update; the lower pane shows the "
    "selected one's evidence, where it happens and the fix; enter goes to its Python frame in "
    "the flame or its op in the ops table. The status line (⚑) counts them.\n"
    "l opens the tail view of the timed stage calls (the stage panel's latency): a stage's "
    "slow calls (p99 and over, or --slow STAGE=MS) against its typical ones (p50 and under): "
    "the frames the slow calls' samples hold more often, the slowest calls, what they "
    "overlapped (GC, the GIL, a queue, syncs, our own profiler windows), and their flame "
    "coloured against the typical calls' (red: more in slow calls); s: next stage.\n"
    "Status line, after the rate (Hz): lag, how far behind its schedule py-spy's sampling fell "
    "in its latest window (py-spy's \"behind in sampling\"); yellow from 0.5 s: the late samples "
    "land in whatever runs when py-spy catches up, so the shares blur. The machine is short of "
    "CPU or the rate is too high: lower --rate, or leave "
    "py-spy a free core. err N, the samples py-spy dropped in the session (red when any): a "
    "stack that changed while a wall window read it without stopping the target, or a line of "
    "py-spy's it could not parse. A few per hundred samples are normal; many make the stage that "
    "calls Python fastest read a little low in the wall view: compare it with the CPU view (c), "
    "read with the target stopped. cov, the share of the session's time py-spy was sampling "
    "(yellow under 80 %: the shares rest on less of the session)."
)


def help_table(keys: Sequence[tuple[str, str]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold #5fafff", no_wrap=True)
    table.add_column()
    for key, text in keys:
        # Text, not a str: a str cell is console markup, where "[flame] fold" is a tag and
        # disappears; the keys' texts are plain words and must show as written
        table.add_row(Text(key), Text(text))
    return table


def legend() -> Text:
    out = Text()
    for stage in STAGES:
        out.append("██ ", style=stage_color(stage))
        out.append(stage + "  ")
    return out


class HelpScreen(ModalScreen[None]):
    """A modal list of the keys; ``keys`` is (key, description) rows for this mode."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Close"),
        Binding("question_mark", "app.pop_screen", "Close", show=False),
    ]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help-box {
        width: 84; max-width: 95%; height: auto; max-height: 90%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    #help-box > Static { width: 100%; }
    """

    def __init__(self, keys: Sequence[tuple[str, str]], mode: str) -> None:
        super().__init__()
        self.keys = list(keys)
        self.mode = mode

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box") as box:
            box.border_title = f"infertop help ({self.mode})"
            box.border_subtitle = "esc closes"
            yield Static(help_table(self.keys), id="help-keys")
            yield Static(Text("\n" + READING, style="dim"), id="help-reading")
            yield Static(legend(), id="help-legend")
