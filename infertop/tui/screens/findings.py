"""The findings view (key i): ranked bottlenecks, live, with their evidence and fix.

Findings are computed by the ingest worker on every snapshot (``analysis/findings/live.py``);
this screen only shows ``Snapshot.findings``. Enter on a finding closes the view and jumps to
where it happens: its Python frame in the flame, or its op / kernel / copy in the ops table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from infertop.analysis.snapshot import Snapshot
from infertop.model.events import Frame
from infertop.model.findings import Finding
from infertop.report.evidence import evidence_lines

SEVERITY_STYLE = {"high": "bold #ff5f5f", "medium": "bold #ffaf5f", "low": "#d7d75f"}

#: rules whose site is a kind of op rather than a named one: the first matching row
_ROWS_FOR_RULE = {
    "memcpy-pageable": lambda name: "Pageable" in name,
    "memcpy-small": lambda name: name.startswith(("Memcpy", "aten::copy_", "aten::to")),
    "memcpy-sync": lambda name: name in ("aten::item", "aten::_local_scalar_dense")
    or "Synchronize" in name,
    "copy-heavy": lambda name: name in ("aten::copy_", "aten::_to_copy", "aten::clone", "aten::contiguous"),
}


@dataclass(frozen=True)
class Jump:
    """Where a finding happens: a Python frame (flame view) or an op name (ops table)."""

    frame: Frame | None = None
    op: str | None = None

    def describe(self) -> str:
        return self.frame.label() if self.frame is not None else f"op {self.op}"


def jump_target(finding: Finding, snap: Snapshot | None) -> Jump | None:
    """The first place named in the finding's ``where`` that the views can show."""
    if snap is None:
        return None
    frames = {t.frame.label(): t.frame for t in snap.top}
    for where in finding.where:
        if where in frames:
            return Jump(frame=frames[where])
    ops = {r.name for r in snap.torch.ops}
    for where in finding.where:
        if where in ops:
            return Jump(op=where)
    if finding.rule == "tiny-ops" and snap.torch.ops:
        return Jump(op=max(snap.torch.ops, key=lambda r: r.count).name)  # the most-called op
    match = _ROWS_FOR_RULE.get(finding.rule)
    if match is not None:
        for row in snap.torch.ops:  # by self time: the costliest matching row
            if match(row.name):
                return Jump(op=row.name)
    return None


def finding_prompt(f: Finding, width: int = 200) -> Text:
    """One line: severity, rule, title (cut with … to fit ``width`` cells)."""
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{f.severity:<6} ", style=SEVERITY_STYLE.get(f.severity, ""))
    line.append(f"{f.rule:<24}", style="bold")
    where = f"pid {f.pid} · " if f.pid is not None else ""
    line.append(where, style="#5fafff")
    room = max(10, width - 36 - len(where))  # the list pads each option
    line.append(f.title if len(f.title) <= room else f.title[: room - 1] + "…")
    return line


def detail_text(f: Finding, jump: Jump | None) -> Text:
    out = Text()
    out.append(f.title + "\n", style="bold")
    out.append(f"{f.rule} · ", style="dim")
    out.append(f.severity, style=SEVERITY_STYLE.get(f.severity, ""))
    if f.pid is not None:
        out.append(f" · in process {f.pid}", style="#5fafff")
    out.append("\n\nevidence\n", style="bold #5fafff")
    out.append("\n".join(evidence_lines(f.evidence)) + "\n")
    if f.where:
        out.append("\nwhere\n", style="bold #5fafff")
        out.append("\n".join(f"  {w}" for w in f.where) + "\n")
    out.append("\nfix\n", style="bold #5fafff")
    out.append(f"  {f.hint}\n")
    out.append(
        f"\nenter: go to {jump.describe()}" if jump else "\n(nothing to jump to in the views)",
        style="dim",
    )
    return out


def empty_text(snap: Snapshot | None) -> Text:
    out = Text("No bottleneck rule fires on what has been seen so far.\n", style="bold")
    if snap is None:
        out.append("Waiting for the first data.", style="dim")
        return out
    missing = []
    if not snap.samples:
        missing.append("no Python samples yet: the stage rules (preprocess-hot, ...) wait for them")
    if not snap.torch.windows:
        missing.append(
            "no torch-profiler windows: the op and GPU rules (copy-heavy, memcpy-*, "
            "python-overhead, tiny-ops, gpu-idle) need the agent (its status is in the bottom line)"
        )
    out.append("\n".join(missing) or "Rules and thresholds: docs/findings.md", style="dim")
    return out


class FindingsScreen(ModalScreen[Jump | None]):
    """Ranked findings over the flame panel; updated with every snapshot while open."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("i", "close", "Close", show=False),
        # replay: seek under the open view and watch findings come and go (live: no effect)
        Binding("left", "app.seek(-5)", "-5s", show=False),
        Binding("right", "app.seek(5)", "+5s", show=False),
    ]

    DEFAULT_CSS = """
    FindingsScreen { align: center middle; }
    #findings-box {
        width: 96%; max-width: 140; height: 90%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    #findings-list { height: auto; max-height: 45%; border: none; }
    #finding-detail-box { height: 1fr; border-top: solid #4e4e4e; }
    """

    def __init__(self, snapshot: Snapshot | None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.findings: tuple[Finding, ...] = ()
        self._list: OptionList | None = None  # set once composed

    def compose(self) -> ComposeResult:
        with Vertical(id="findings-box") as box:
            box.border_title = "findings"
            box.border_subtitle = "↑↓ select · enter go to · esc close"
            yield OptionList(id="findings-list")
            with VerticalScroll(id="finding-detail-box"):
                yield Static(id="finding-detail")

    def on_mount(self) -> None:
        self._list = self.query_one(OptionList)
        self.show(self.snapshot)
        self._list.focus()

    def on_unmount(self) -> None:
        self._list = None

    @property
    def selected(self) -> Finding | None:
        i = self._list.highlighted if self._list is not None else None
        return self.findings[i] if i is not None and 0 <= i < len(self.findings) else None

    def show(self, snapshot: Snapshot | None) -> None:
        """Redraw for a new snapshot, keeping the selected rule when it still fires."""
        self.snapshot = snapshot
        options = self._list
        if options is None:  # not composed yet (on_mount shows it), or closing
            return
        keep = self.selected.rule if self.selected else None
        self.findings = snapshot.findings if snapshot is not None else ()
        options.clear_options()
        width = options.scrollable_content_region.width or self.app.size.width - 8
        options.add_options(Option(finding_prompt(f, width), id=f.rule) for f in self.findings)
        if self.findings:
            rules = [f.rule for f in self.findings]
            options.highlighted = rules.index(keep) if keep in rules else 0
        n = len(self.findings)
        box = self.query_one("#findings-box")
        box.border_title = f"findings · {n}" if n else "findings"
        self._show_detail()

    def _show_detail(self) -> None:
        f = self.selected
        detail = self.query_one("#finding-detail", Static)
        if f is None:
            detail.update(empty_text(self.snapshot))
        else:
            detail.update(detail_text(f, jump_target(f, self.snapshot)))

    @on(OptionList.OptionHighlighted)
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        self._show_detail()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        f = self.selected
        self.dismiss(jump_target(f, self.snapshot) if f is not None else None)

    def action_close(self) -> None:
        self.dismiss(None)
