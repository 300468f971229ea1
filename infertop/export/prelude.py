"""What every export needs: its result, and for a recording a first pass over it (the time
origin, the stage rules it was recorded with, what is known of the target)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from infertop.errors import BadInputFile
from infertop.model.events import (
    Event,
    OpWindow,
    ProcessDef,
    SampleWindow,
    StageRules,
    StageSpan,
    TargetInfo,
)
from infertop.record.stream import RecordingStream
from infertop.sources import event_time

if TYPE_CHECKING:
    from infertop.trace.table import KinetoTrace

#: µs: more than a torch.profiler trace ever spans (its times as int64 ns would overflow)
MAX_TRACE_SPAN_US = 1e12


class ExportResult:
    def __init__(self, output: str, events: int, warning: str | None = None) -> None:
        self.output, self.events, self.warning = output, events, warning


def scan_recording(
    stream: RecordingStream,
    processes: dict[int, ProcessDef] | None = None,
    observe: Callable[[Event], None] | None = None,
) -> tuple[float, tuple[tuple[str, str], ...], TargetInfo]:
    """First pass: the earliest time (the trace's zero), the recorded stage rules, the target;
    the process definitions go into ``processes`` when given, and every event to ``observe``."""
    t0: float | None = None
    rules: tuple[tuple[str, str], ...] = ()
    target = TargetInfo(pid=None)
    for ev in stream:
        if observe is not None:
            observe(ev)
        t = event_time(ev)
        if isinstance(ev, (SampleWindow, StageSpan, OpWindow)):
            t = ev.t_start
        if t is not None and t > 0 and (t0 is None or t < t0):
            t0 = t
        match ev:
            case ProcessDef() if processes is not None:
                processes.setdefault(ev.pid, ev)
            case StageRules() if not rules:
                rules = ev.rules
            case TargetInfo():
                target = TargetInfo(
                    ev.pid if ev.pid is not None else target.pid,
                    ev.cmdline or target.cmdline,
                    ev.python or target.python,
                    ev.torch or target.torch,
                    ev.started or target.started,
                )
    return (t0 if t0 is not None else target.started or 0.0), rules, target


def read_trace_to_export(path: str) -> KinetoTrace:
    """A torch.profiler trace whose times fit an export; a span of weeks is refused (exit 5),
    as ``infertop import`` does."""
    from infertop.trace.table import read_trace  # here: a recording's export needs no trace reader

    trace = read_trace(path)
    if len(trace):  # Python floats: an absurd span is inf here, not a numpy overflow warning
        span = float(trace.ts.max()) - float(trace.ts.min()) + float(trace.dur.max())
        if not span <= MAX_TRACE_SPAN_US:
            raise BadInputFile(
                f"{path}: its timestamps span more than 11 days; is it a torch.profiler trace?"
            )
    return trace
