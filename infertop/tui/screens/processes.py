"""The process selector (key W): every process of a many-process session, one line each —
pid, role guess, CPU, GPU memory, samples per second, agent windows, the command — and a
first line for all of them merged. Enter shows the chosen one in every panel; ``w`` still
cycles through them without opening this. Updated with every snapshot while open."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from infertop.analysis.processes.table import ProcessRow
from infertop.analysis.snapshot import Snapshot
from infertop.words import plural

ALL = "all"  # the option id of the merged view
HEADER = f"   {'pid':>8}  {'role':<18} {'CPU':>5} {'GPU mem':>9} {'samples/s':>9} {'ops':>4}  command"


def _gpu(row: ProcessRow) -> str:
    if row.gpu_memory is None:
        return "–"
    mib = row.gpu_memory / 2**20
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def row_text(row: ProcessRow, shown: bool, width: int = 200) -> Text:
    """One process as a line of the selector (``shown``: the one the panels show now)."""
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append("▸ " if shown else "  ", style="bold")
    line.append(f"{row.pid:>8}  ")
    line.append(f"{row.role[:18]:<18} ", style="bold")
    line.append(f"{row.cpu:>5.2f} {_gpu(row):>9} {row.samples_per_s:>9.0f} {row.op_windows:>4}  ")
    room = max(8, width - len(line))
    cmd = row.cmdline if len(row.cmdline) <= room else row.cmdline[: room - 1] + "…"
    if row.exited:
        line.append("exited ", style="bold #ff5f5f")
    line.append(cmd, style="dim")
    return line


def merged_text(snap: Snapshot | None, shown: bool) -> Text:
    n = len(snap.ui.process_rows) if snap is not None else 0
    gone = sum(r.exited for r in snap.ui.process_rows) if snap is not None else 0
    line = Text(no_wrap=True)
    line.append("▸ " if shown else "  ", style="bold")
    line.append(f"all {n} {plural(n, 'process')} merged", style="bold")
    if gone:
        line.append(f"  ({gone} exited)", style="dim")
    return line


class ProcessesScreen(ModalScreen[object]):
    """Dismissed with the chosen pid, ``ALL`` for the merged view, or None (closed)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("W", "close", "Close", show=False),
    ]

    DEFAULT_CSS = """
    ProcessesScreen { align: center middle; }
    #processes-box {
        width: 96%; max-width: 150; height: auto; max-height: 90%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    #processes-header { color: $text-muted; }
    #processes-list { height: auto; max-height: 30; border: none; }
    #processes-note { color: $text-muted; }
    """

    def __init__(self, snapshot: Snapshot | None, shown: int | None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.shown = shown  # the process the panels show (None: merged)
        self.pids: list[int | str] = []
        self._list: OptionList | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="processes-box") as box:
            box.border_title = "processes"
            box.border_subtitle = "↑↓ select · enter show · esc close"
            yield Static(HEADER, id="processes-header")
            yield OptionList(id="processes-list")
            yield Static(
                "CPU: cores' worth of active samples, last 5 s · samples/s: what py-spy sees of "
                "it · ops: torch.profiler windows from its agent",
                id="processes-note",
            )

    def on_mount(self) -> None:
        self._list = self.query_one(OptionList)
        self.show(self.snapshot)
        self._list.focus()

    def on_unmount(self) -> None:
        self._list = None

    def show(self, snapshot: Snapshot | None) -> None:
        """Redraw for a new snapshot: the lines in place while the processes are the same ones
        (a live view updates them every tick), rebuilt, keeping the highlighted process, when
        one came or went."""
        self.snapshot = snapshot
        options = self._list
        if options is None:
            return
        rows = snapshot.ui.process_rows if snapshot is not None else ()
        pids: list[int | str] = [ALL, *(r.pid for r in rows)]
        # one line each: the list's own width once laid out, else the box's at most
        width = options.scrollable_content_region.width or int(min(150, 0.96 * self.app.size.width)) - 8
        prompts = [merged_text(snapshot, self.shown is None)]
        prompts += [row_text(r, r.pid == self.shown, width) for r in rows]
        if pids == self.pids:
            for i, prompt in enumerate(prompts):
                options.replace_option_prompt_at_index(i, prompt)
            return
        at = options.highlighted
        keep = self.pids[at] if at is not None and 0 <= at < len(self.pids) else None
        self.pids = pids
        options.clear_options()
        options.add_options(Option(p, id=str(pid)) for p, pid in zip(prompts, pids))
        start = keep if keep is not None else (self.shown if self.shown is not None else ALL)
        options.highlighted = pids.index(start) if start in pids else 0

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        i = event.option_index
        self.dismiss(self.pids[i] if 0 <= i < len(self.pids) else None)

    def action_close(self) -> None:
        self.dismiss(None)
