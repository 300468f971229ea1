"""What every export needs: its result, and for a recording a first pass over it (the time
origin, the stage rules it was recorded with, what is known of the target)."""

from __future__ import annotations

from infertop.model.events import OpWindow, SampleWindow, StageRules, StageSpan, TargetInfo
from infertop.record.stream import RecordingStream
from infertop.sources import event_time


class ExportResult:
    def __init__(self, output: str, events: int, warning: str | None = None) -> None:
        self.output, self.events, self.warning = output, events, warning


def scan_recording(
    stream: RecordingStream,
) -> tuple[float, tuple[tuple[str, str], ...], TargetInfo]:
    """First pass: the earliest time (the trace's zero), the recorded stage rules, the target."""
    t0: float | None = None
    rules: tuple[tuple[str, str], ...] = ()
    target = TargetInfo(pid=None)
    for ev in stream:
        t = event_time(ev)
        if isinstance(ev, (SampleWindow, StageSpan, OpWindow)):
            t = ev.t_start
        if t is not None and t > 0 and (t0 is None or t < t0):
            t0 = t
        if isinstance(ev, StageRules) and not rules:
            rules = ev.rules
        elif isinstance(ev, TargetInfo):
            target = TargetInfo(
                ev.pid if ev.pid is not None else target.pid,
                ev.cmdline or target.cmdline,
                ev.python or target.python,
                ev.torch or target.torch,
                ev.started or target.started,
            )
    return (t0 if t0 is not None else target.started or 0.0), rules, target
