"""The status line: target, sampling health, recording state, collectors, flags and notes."""

from __future__ import annotations

import os
from dataclasses import dataclass

from rich.text import Text
from textual.widget import Widget

from infertop.analysis.snapshot import Snapshot
from infertop.tui.palette import human_bytes
from infertop.words import counted, plural

STATE_STYLES = {"running": "green", "stopped": "dim", "unavailable": "red", "failed": "bold red"}
SEP = " │ "
SEP_STYLE = "#5f5f5f"


def short_cmdline(cmdline: str | None, width: int = 40) -> str:
    """``python serve.py --port 8000``: program names without their directories, cut to fit."""
    if not cmdline:
        return "?"
    parts = cmdline.split()
    parts = [os.path.basename(p) if i < 2 and "/" in p else p for i, p in enumerate(parts)]
    text = " ".join(parts)
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


Part = tuple[int, Text, Text]  # (priority: lower is kept longer, full text, short text)


@dataclass
class _Slot:
    prio: int
    text: Text
    short: Text


def process_part(snap: Snapshot) -> Part:
    """How many processes are followed, and which one the panels show (key w)."""
    n = len(snap.processes)
    role = dict(snap.processes).get(snap.process) if snap.process is not None else None
    shown = "all merged" if role is None else f"{role} (pid {snap.process})"
    if snap.process is not None and snap.process in snap.processes_exited:
        shown += ", exited"
    style = "bold #5fafff" if role else ""
    full = Text(f"{n} {plural(n, 'process')}", style=style)
    short = Text(f"{n} proc", style=style)
    if snap.processes_exited:  # a child died: said here, and marked on the timeline
        gone = f", {len(snap.processes_exited)} exited"
        full.append(gone, style="bold #d7af5f")
        short.append(gone, style="bold #d7af5f")
    full.append(f" · {shown} (w)", style=style)
    short.append(f" · {role or 'all'}", style=style)
    return (0, full, short)


def fit(parts: list[Part], width: int) -> Text:
    """Join parts with separators to fit ``width``: the less important parts switch to their
    short form, then the least important are dropped, and only then does the most important
    one shorten; whatever is left over is cut with an ellipsis."""
    slots = [_Slot(*p) for p in parts]
    top = min((s.prio for s in slots), default=0)

    def length() -> int:
        return sum(len(s.text) for s in slots) + len(SEP) * (len(slots) - 1)

    for slot in sorted(slots, key=lambda s: -s.prio):
        if length() <= width:
            break
        if slot.prio != top:
            slot.text = slot.short
    while len(slots) > 1 and length() > width and max(s.prio for s in slots) != top:
        slots.remove(max(slots, key=lambda s: s.prio))
    for slot in slots:
        if length() > width:
            slot.text = slot.short
    row = Text(no_wrap=True, overflow="ellipsis")
    for i, slot in enumerate(slots):
        if i:
            row.append(SEP, style=SEP_STYLE)
        row.append_text(slot.text)
    return row


FINDING_STYLES = {"high": "bold #ff5f5f", "medium": "bold #ffaf5f", "low": "#d7d75f"}


class StatusLine(Widget):
    """Two rows (more when there are notes or an error); always shows the newest snapshot."""

    DEFAULT_CSS = """
    StatusLine { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.paused = False
        self.error: str | None = None
        self.replay_path: str | None = None

    def show(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.refresh(layout=True)

    def set_flags(self, *, paused: bool | None = None, error: str | None | bool = False) -> None:
        """Update the paused flag and/or the error text (``False`` leaves it as it is)."""
        if paused is not None:
            self.paused = paused
        if error is not False:
            self.error = error  # type: ignore[assignment]
        self.refresh(layout=True)

    @property
    def is_paused(self) -> bool:
        snap = self.snapshot
        replay_paused = snap is not None and snap.replay is not None and not snap.replay.playing
        return self.paused or replay_paused

    def render(self) -> Text:
        snap = self.snapshot
        width = self.content_region.width or 80
        lines = [self._first_row(snap, width)]
        if snap is not None:
            lines.append(self._second_row(snap, width))
            for note in snap.notes:
                lines.append(Text("⚠ " + note, style="#ffaf00", no_wrap=True, overflow="ellipsis"))
        if self.error:
            lines.append(
                Text("✖ " + self.error, style="bold red", no_wrap=True, overflow="ellipsis")
            )
        return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)

    def _first_row(self, snap: Snapshot | None, width: int) -> Text:
        flags = Text()
        if self.is_paused:
            flags.append(" PAUSED ", style="bold black on #d7af5f").append(" ")
        if snap is not None and snap.exited is not None:
            flags.append(" target exited ", style="bold white on #af0000").append(" ")
        if snap is None:
            return flags.append("starting…", style="dim")
        target = snap.target
        pid = Text(f"pid {target.pid}" if target.pid is not None else "pid ?", style="bold")
        versions = Text()
        if target.python:
            versions.append(f"python {target.python}")
        if target.torch:
            versions.append(f"  torch {target.torch}", style="dim")
        room = width - len(flags) - len(pid) - 1 - (len(versions) + len(SEP) if versions else 0)
        if room < 16 and target.torch:  # narrow: the command line matters more than torch
            versions = Text(f"python {target.python}") if target.python else Text()
            room = width - len(flags) - len(pid) - 1 - (len(versions) + len(SEP) if versions else 0)
        pid.append(" " + short_cmdline(target.cmdline, max(12, room)), style="not bold")
        parts: list[Part] = [(0, pid, pid)]
        if versions:
            parts.append((1, versions, versions))
        row = flags + fit(parts, width - len(flags))
        row.no_wrap, row.overflow = True, "ellipsis"
        return row

    def _second_row(self, snap: Snapshot, width: int) -> Text:
        parts: list[Part] = []
        if snap.replay is not None:
            rec = Text("▶ replay", style="bold #5fafff")
            short = rec.copy()
            if self.replay_path:
                rec.append(" " + os.path.basename(self.replay_path), style="not bold")
        elif snap.recording:
            rec = Text("● REC", style="bold red")
            short = rec.copy().append(f" {human_bytes(snap.recording_bytes)}")
            rec.append(f" {snap.recording} {human_bytes(snap.recording_bytes)}")
        else:
            rec = short = Text("not recording", style="dim")
        parts.append((0, rec, short))
        if snap.findings:  # the findings view (i) has something to show
            n_f, worst = len(snap.findings), snap.findings[0].severity
            style = FINDING_STYLES.get(worst, "")
            full = Text(f"⚑ {n_f} finding{'s' * (n_f != 1)} (i)", style=style)
            parts.append((0, full, Text(f"⚑{n_f}", style=style)))
        lag = ("bold #d7af5f" if snap.lag_s >= 0.5 else "", f"{snap.lag_s:.2f}s")
        err = ("bold red" if snap.errors else "", str(snap.errors))
        cov = ("#d7af5f" if snap.samples and snap.coverage < 0.8 else "", f"{snap.coverage:.0%}")
        full = Text(f"{snap.rate_hz:g} Hz")
        short = Text(f"{snap.rate_hz:g}Hz")
        for name, (style, value) in (("lag", lag), ("err", err), ("cov", cov)):
            full.append(f" {name} {value}", style=style)
            if style or name == "lag":  # the short form keeps lag and anything that is wrong
                short.append(f" {name} {value}", style=style)
        parts.append((2, full, short))
        parts.append((3, Text(counted(snap.samples, "sample")), Text(f"{snap.samples:,} smp")))
        if snap.processes:  # --children
            parts.append(process_part(snap))
        n = snap.torch.windows
        for st in snap.statuses:
            message = st.message.removeprefix(f"{st.collector}: ")
            short = Text(f"{st.collector}: ").append(st.state, style=STATE_STYLES.get(st.state, ""))
            full = short.copy()
            if message:
                full.append(f" {message}", style="dim")
            if st.collector == "agent" and n:
                full.append(f" · {counted(n, 'op window')}")
                short.append(f" · {n:,} win")
            parts.append((1, full, short))
        if n and not any(st.collector == "agent" for st in snap.statuses):
            parts.append((3, Text(counted(n, "op window")), Text(f"{n:,} win")))
        return fit(parts, width)
