"""``infertop export FILE --format speedscope``: CPU profiles for speedscope.

From a recording: one *sampled* profile per Python thread and one per stage (all threads'
samples of that stage), weights in milliseconds (samples × sample period). Samples keep window
order, so speedscope's "time order" view reads left to right through the session (within a
window, order is not known); identical consecutive stacks are merged. From a torch.profiler
trace: one *evented* profile per CPU thread of its ops and annotations (what nests).

Streamed: each profile's samples are spooled to a temporary file as they come and the document
is assembled at the end, so memory does not grow with the recording.
"""

from __future__ import annotations

import os
import tempfile
from typing import IO, Any

from infertop import __version__
from infertop.analysis.stages import StageClassifier
from infertop.config import STAGES, Config
from infertop.export.jsonout import JsonStream
from infertop.export.prelude import ExportResult, scan_recording
from infertop.model.events import Frame, FrameDef, SampleWindow, StackDef, ThreadDef, window_ticks
from infertop.model.symbols import SymbolTable
from infertop.record.stream import RecordingStream

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


class _Profile:
    """One sampled profile, spooled: samples and weights go to temp files as they settle."""

    def __init__(self, name: str) -> None:
        self.name = name
        # both closed by write_to, once copied into the export
        self.samples: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self.weights: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self.n = 0
        self.pending: tuple[int, ...] | None = None
        self.pending_w = 0.0
        self.start: float | None = None
        self.end = 0.0
        self.total = 0.0

    def add(self, stack: tuple[int, ...], weight_ms: float, t0: float, t1: float) -> None:
        if self.start is None:
            self.start = t0
        self.end = max(self.end, t1)
        self.total += weight_ms
        if stack == self.pending:
            self.pending_w += weight_ms
            return
        self._settle()
        self.pending, self.pending_w = stack, weight_ms

    def _settle(self) -> None:
        if self.pending is None:
            return
        sep = b"," if self.n else b""
        self.samples.write(sep + b"[" + ",".join(map(str, self.pending)).encode() + b"]")
        self.weights.write(sep + repr(round(self.pending_w, 6)).encode())
        self.n += 1
        self.pending = None

    def write_to(self, out: JsonStream, origin: float) -> None:
        self._settle()
        head = {
            "type": "sampled",
            "name": self.name,
            "unit": "milliseconds",
            "startValue": 0,
            "endValue": round(self.total, 6),
        }
        out.write(out.value(head)[:-1] + b',"samples":[')
        _copy(self.samples, out)
        out.write(b'],"weights":[')
        _copy(self.weights, out)
        out.write(b"]}")
        self.samples.close()
        self.weights.close()


def _copy(fh: IO[bytes], out: JsonStream) -> None:
    fh.seek(0)
    while True:
        chunk = fh.read(1 << 20)
        if not chunk:
            return
        out.write(chunk)


def export_speedscope(path: str, out: str, config: Config, trace: bool) -> ExportResult:
    if trace:
        # here: a recording's profiles need not load the trace model (numpy columns)
        from infertop.export.speedscope_trace import export_speedscope_trace

        return export_speedscope_trace(path, out)
    stream = RecordingStream(path)
    t0, recorded_rules, target = scan_recording(stream)
    classifier = StageClassifier(tuple(config.stage_rules) + tuple(recorded_rules))
    symbols = SymbolTable()
    frames, stacks = symbols.frames, symbols.stacks
    names: dict[int, str] = {}
    threads: dict[int, _Profile] = {}
    stages: dict[str, _Profile] = {}
    for ev in stream:
        match ev:
            case FrameDef() | StackDef():
                symbols.learn(ev)
            case ThreadDef():  # --children: which process, too
                names[ev.tid] = f"pid {ev.pid} {ev.name}" if ev.pid else ev.name
            case SampleWindow() if not ev.idle:  # CPU windows: samples of work
                period_ms = (ev.t_end - ev.t_start) * 1000 / window_ticks(ev)
                for tid, sid, n in sorted(
                    ev.counts, key=lambda r: (r[0], stacks[r[1]] if 0 <= r[1] < len(stacks) else ())
                ):
                    if n <= 0 or not 0 <= sid < len(stacks):
                        continue
                    stack = stacks[sid]
                    stage = classifier.stage_of(sid, [frames[f] for f in stack])
                    prof = threads.get(tid)
                    if prof is None:
                        prof = threads[tid] = _Profile(f"thread {names.get(tid) or tid} ({tid})")
                    prof.add(stack, n * period_ms, ev.t_start, ev.t_end)
                    sp = stages.get(stage)
                    if sp is None:
                        sp = stages[stage] = _Profile(f"stage {stage}")
                    sp.add(stack, n * period_ms, ev.t_start, ev.t_end)
    rank = {s: i for i, s in enumerate(STAGES)}
    profiles = sorted(threads.values(), key=lambda p: -p.total) + sorted(
        stages.values(), key=lambda p: (rank.get(p.name[6:], len(rank)), p.name)
    )
    doc = JsonStream(out)
    try:
        title = f"infertop {os.path.basename(path)}" + (
            f" (pid {target.pid})" if target.pid else ""
        )
        head = {
            "$schema": SCHEMA,
            "exporter": f"infertop {__version__}",
            "name": title,
            "activeProfileIndex": 0,
        }
        doc.write(doc.value(head)[:-1] + b',"profiles":[')
        for i, prof in enumerate(profiles):
            if i:
                doc.write(b",")
            prof.write_to(doc, t0)
        shared: dict[str, Any] = {"frames": [_frame(f) for f in frames]}
        doc.write(b'],"shared":' + doc.value(shared) + b"}\n")
        doc.commit()
    except BaseException:
        doc.abort()
        raise
    return ExportResult(out, sum(p.n for p in profiles), stream.warning)


def _frame(f: Frame) -> dict[str, Any]:
    d: dict[str, Any] = {"name": f.function, "file": f.file}
    if f.line > 0:
        d["line"] = f.line
    return d
