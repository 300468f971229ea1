"""`infertop import`: a torch.profiler trace, or a directory of them (one per rank), turned into
a recording: one trace is reduced by ``import_kineto``, a directory by ``import_ranks``."""

from __future__ import annotations

import os

from infertop.errors import UsageError
from infertop.model.events import CollectorStatus, Event, Marker, StageRules, TargetInfo
from infertop.record.import_kineto import ImportResult, Progress, read_windows, write_recording
from infertop.record.import_ranks import import_ranks
from infertop.trace.files import trace_files


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def import_trace(path: str, output: str, progress: Progress | None = None) -> ImportResult:
    """One trace, or a directory with one trace per rank (each rank one process)."""
    say = progress or (lambda _text: None)
    files = trace_files(path)
    if any(_same(f, output) for f in files):
        raise UsageError("the output would overwrite the trace", "give another -o FILE")
    if len(files) > 1:
        return import_ranks(path, files, output, say)
    source = files[0]
    plan, windows = read_windows(source, say)
    t0 = windows[0].t_start
    prelude: list[Event] = [
        TargetInfo(pid=plan.pid, started=t0),
        StageRules(()),
        CollectorStatus(t0, "py-spy", "unavailable", "imported torch.profiler trace: no Python samples"),
        CollectorStatus(t0, "agent", "stopped", f"imported from {os.path.basename(source)}"),
        Marker(t0, "imported torch.profiler trace", {"trace": os.path.abspath(source)}),
    ]
    write_recording(output, prelude, windows)
    return ImportResult(source, output, len(windows), plan.n, plan.t1 - plan.t0)
