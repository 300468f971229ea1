"""`infertop merge A B ... -o ALL`: recordings made on different hosts (or of different services
on one host) become one recording, every input's processes processes of the output.

- An input made with ``--children`` brings its process definitions; one made without is one
  process, its target. Pids and tids keep their values unless another input has them
  (``remap.IdRemap``); frames and stacks are re-interned into one table.
- Events are laid on one timeline in time order: definitions first, then every timed event by
  its time. Sample windows stay per input (each is of its own processes). An input's target
  exiting becomes a ``process PID exited`` marker: in the output it is one process of many.
- Clock: every time is the recording host's wall clock (unix s). The output aligns on it, plus
  an ``--offset FILE=SECONDS`` the user gives for an input whose clock is known to be off.
  How well it lines up is what the inputs' clock anchors (``record/clock.py``) say: the sum of
  their ``maxerror`` while every one was synchronised, else unknown; an input shifted by hand
  is aligned by the user's judgement, and no bound is claimed.
- NVML readings become one series of readings of every host's GPUs, each GPU an index of its
  own named after its host (``merge_gpu.py``).
- Each input gets a ``merged input`` marker (path, host, its processes' new pids, its target,
  offset, clock); the whole a ``recordings merged`` marker with the accuracy claimed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from infertop.errors import BadInputFile, UsageError
from infertop.model.engine import EngineStats
from infertop.model.events import (
    MERGED,
    MERGED_INPUT,
    AllocatorReading,
    CollectorStatus,
    CpuWait,
    Event,
    Frame,
    FrameDef,
    GenerationCall,
    Marker,
    OpWindow,
    ProcessDef,
    SampleWindow,
    StackDef,
    StageRules,
    StageSpan,
    TargetExited,
    TargetInfo,
    ThreadDef,
)
from infertop.model.gpu import GpuReading
from infertop.model.host_memory import HostMemoryReading, ObjectCensus
from infertop.record.clock import SYNCED, ClockAnchor, anchor_of
from infertop.record.merge_gpu import GpuMerge
from infertop.record.reader import read_recording
from infertop.record.remap import IdRemap
from infertop.record.writer import RecordingWriter

BATCH = 2000  # events per record


@dataclass(frozen=True)
class InputReport:
    path: str
    host: str | None
    processes: tuple[int, ...]  # new pids, the input's target first
    offset_s: float
    clock: str  # how its clock stood: "synchronised, maxerror 12.3 ms" / "not synchronised" / ...
    bound_us: int | None  # its maxerror while synchronised
    warning: str | None  # damage: read up to it
    offset_given: bool = False  # --offset named it: its alignment is the user's, not its clock's


@dataclass(frozen=True)
class MergeResult:
    output: str
    inputs: tuple[InputReport, ...]
    accuracy_us: int | None
    accuracy: str  # one line: what alignment the output can claim
    events: int
    seconds: float


def parse_offsets(specs: list[str], paths: list[str]) -> dict[int, float]:
    """``FILE=SECONDS`` flags -> input index -> offset; FILE must be one of the inputs."""
    out: dict[int, float] = {}
    for spec in specs:
        name, sep, value = spec.rpartition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = float("nan")
        if not sep or not name or not abs(seconds) < 1e6:
            raise UsageError(
                f"--offset {spec!r} is not FILE=SECONDS", "e.g. --offset web2.infertop=-0.35"
            )
        hits = [i for i, p in enumerate(paths) if _same(p, name) or p == name]
        if not hits:
            raise UsageError(f"--offset {spec!r}: {name} is not one of the recordings merged")
        out[hits[0]] = seconds
    return out


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def check_paths(paths: list[str], output: str) -> None:
    if len(paths) < 2:
        raise UsageError("merge needs at least two recordings", "infertop merge A.infertop B.infertop -o ALL.infertop")
    for i, a in enumerate(paths):
        if _same(a, output):
            raise UsageError(f"the output {output} is one of the inputs", "give another -o FILE")
        for b in paths[:i]:
            if _same(a, b):
                raise UsageError(f"{a} is given twice", "merge each recording once")


def _clock_line(anchor: ClockAnchor | None) -> str:
    if anchor is None:
        return "no clock anchor (an older recording)"
    if anchor.state != SYNCED:
        return f"clock {anchor.state}"
    bound = "?" if anchor.maxerror_us is None else f"{anchor.maxerror_us / 1000:.1f} ms"
    return f"clock synchronised, maxerror {bound}"


class _Merger:
    """The output's id tables and events; inputs are added one by one."""

    def __init__(self) -> None:
        self.pids, self.tids = IdRemap(), IdRemap()
        self.frames: dict[Frame, int] = {}
        self.stacks: dict[tuple[int, ...], int] = {}
        self.defs: list[Event] = []  # processes, threads, frames, stacks: before any use
        self.timed: list[tuple[float, int, Event]] = []
        self.rules: list[tuple[str, str]] = []
        self.targets: list[TargetInfo] = []
        self.gpu = GpuMerge()  # NVML readings: combined across inputs at the end

    def _time(self, t: float, ev: Event) -> None:
        self.timed.append((t, len(self.timed), ev))

    def add(
        self, path: str, events: list[Event], offset: float, warning: str | None, given: bool = False
    ) -> InputReport:
        target = TargetInfo(pid=None)
        procs: dict[int, ProcessDef] = {}
        for ev in events:  # what the input says of its target and processes
            match ev:
                case TargetInfo():
                    if target.pid is None or ev.pid in (None, target.pid):
                        target = TargetInfo(
                            ev.pid if ev.pid is not None else target.pid,
                            target.cmdline or ev.cmdline, target.python or ev.python,
                            target.torch or ev.torch, target.started or ev.started,
                        )  # fmt: skip
                case ProcessDef():
                    procs[ev.pid] = ev
        anchor = anchor_of(events)
        host = anchor.host if anchor else None
        tpid = target.pid or 0
        if tpid not in procs:
            procs[tpid] = ProcessDef(tpid, 0, target.cmdline or "")
        pmap: dict[int, int] = {}
        for old in sorted(procs, key=lambda p: (p != tpid, p)):
            pmap[old] = self.pids.take(old)
        for old, p in procs.items():
            ppid = pmap.get(p.ppid, 0) if p.ppid else 0
            self.defs.append(ProcessDef(pmap[old], ppid, p.cmdline))
        new_target = pmap[tpid]
        self.targets.append(replace(target, pid=new_target, started=target.started + offset))
        tmap: dict[int, int] = {}
        fmap: list[int] = []
        smap: list[int] = []

        def tid(old: int, owner: int = 0) -> int:
            new = tmap.get(old)
            if new is None:
                new = tmap[old] = self.tids.take(old)
                self.defs.append(ThreadDef(new, f"thread {old}", pmap.get(owner, new_target)))
            return new

        def pid(old: int) -> int:  # an op window's or allocator reading's (0: the target)
            return pmap.get(old or tpid, new_target)

        nested = any(isinstance(e, Marker) and e.text == MERGED_INPUT for e in events)
        gpu = self.gpu.add(path, host, nested, pmap)
        first_t: float | None = None
        for ev in events:
            match ev:
                case FrameDef():
                    if ev.frame_id == len(fmap):
                        new = self.frames.get(ev.frame)
                        if new is None:
                            new = self.frames[ev.frame] = len(self.frames)
                            self.defs.append(FrameDef(new, ev.frame))
                        fmap.append(new)
                case StackDef():
                    if ev.stack_id == len(smap):
                        key = tuple(fmap[f] for f in ev.frames)
                        new = self.stacks.get(key)
                        if new is None:
                            new = self.stacks[key] = len(self.stacks)
                            self.defs.append(StackDef(new, key))
                        smap.append(new)
                case ThreadDef():
                    owner = ev.pid or tpid
                    if ev.tid not in tmap:
                        tmap[ev.tid] = self.tids.take(ev.tid)
                    self.defs.append(ThreadDef(tmap[ev.tid], ev.name, pmap.get(owner, new_target)))
                case StageRules():
                    self.rules += [r for r in ev.rules if r not in self.rules]
                case TargetInfo() | ProcessDef():
                    continue
                case SampleWindow():
                    counts = tuple((tid(t), smap[s], n) for t, s, n in ev.counts)
                    w = replace(ev, t_start=ev.t_start + offset, t_end=ev.t_end + offset, counts=counts)
                    self._time(w.t_end, w)
                    first_t = w.t_start if first_t is None else min(first_t, w.t_start)
                case StageSpan():
                    s = replace(ev, tid=tid(ev.tid), t_start=ev.t_start + offset, t_end=ev.t_end + offset)
                    self._time(s.t_end, s)
                case GenerationCall():
                    first = None if ev.t_first is None else ev.t_first + offset
                    g = replace(ev, tid=tid(ev.tid), t_start=ev.t_start + offset, t_first=first,
                                t_end=ev.t_end + offset, pid=pid(ev.pid))  # fmt: skip
                    self._time(g.t_end, g)
                case OpWindow():
                    owner = ev.pid or tpid
                    ann = tuple(
                        replace(a, tid=tid(a.tid, owner), t_start=a.t_start + offset, t_end=a.t_end + offset)
                        for a in ev.annotations
                    )
                    ow = replace(ev, t_start=ev.t_start + offset, t_end=ev.t_end + offset,
                                 annotations=ann, pid=pid(ev.pid))  # fmt: skip
                    self._time(ow.t_end, ow)
                    first_t = ow.t_start if first_t is None else min(first_t, ow.t_start)
                case AllocatorReading():
                    self._time(ev.t + offset, replace(ev, t=ev.t + offset, pid=pid(ev.pid)))
                case HostMemoryReading():
                    self._time(ev.t + offset, replace(ev, t=ev.t + offset, pid=pid(ev.pid)))
                case ObjectCensus():
                    self._time(ev.t + offset, replace(ev, t=ev.t + offset, pid=pid(ev.pid)))
                case EngineStats():
                    self._time(ev.t_end + offset, replace(ev, t_start=ev.t_start + offset,
                                                         t_end=ev.t_end + offset, pid=pid(ev.pid)))  # fmt: skip
                case CpuWait():
                    self._time(ev.t_end + offset, replace(ev, t_start=ev.t_start + offset,
                                                         t_end=ev.t_end + offset, pid=pid(ev.pid)))  # fmt: skip
                case GpuReading():  # devices and pids: in ``finish``
                    gpu.append(replace(ev, t=ev.t + offset))
                case CollectorStatus():
                    self._time(ev.t + offset, replace(ev, t=ev.t + offset))
                case TargetExited():  # one process of the output among others
                    text = f"process {new_target} exited"
                    extra = {"pid": str(new_target), "process": "exited", "reason": ev.reason}
                    self._time(ev.t + offset, Marker(ev.t + offset, text, extra))
                case Marker():
                    self._time(ev.t + offset, self._marker(ev, offset, pmap))
        if not nested:
            extra = {
                "input": os.path.abspath(path),
                "host": host or "",
                "pids": ",".join(str(p) for p in pmap.values()),
                "target": str(new_target),
                "offset_s": f"{offset:+.6f}",
                "clock": anchor.state if anchor else "unknown",
            }
            if anchor is not None and anchor.maxerror_us is not None:
                extra["maxerror_us"] = str(anchor.maxerror_us)
            if given:
                extra["offset_given"] = "by hand"
            t = (first_t if first_t is not None else target.started + offset)
            self._time(t, Marker(t, MERGED_INPUT, extra))
        return InputReport(
            path, host, tuple(pmap.values()), offset, _clock_line(anchor),
            anchor.bound_us if anchor else None, warning, given,
        )  # fmt: skip

    @staticmethod
    def _marker(m: Marker, offset: float, pmap: dict[int, int]) -> Marker:
        """A marker moved in time, the pids it names renamed (exits, nested merges)."""
        extra = dict(m.extra)
        text = m.text
        old = extra.get("pid", "")
        if old.isdigit() and int(old) in pmap:
            extra["pid"] = str(pmap[int(old)])
            text = text.replace(f"process {old} ", f"process {extra['pid']} ")
        if m.text == MERGED_INPUT:
            for key in ("pids", "target"):
                ids = [int(p) for p in extra.get(key, "").split(",") if p.isdigit()]
                extra[key] = ",".join(str(pmap.get(p, p)) for p in ids)
        return Marker(m.t + offset, text, extra)

    def finish(self) -> None:
        """The NVML readings of all inputs as one series (``merge_gpu``), on the timeline."""
        for r in self.gpu.readings(set(self.pids.used), self.pids):
            self._time(r.t, r)

    def target(self, hosts: list[str | None]) -> TargetInfo:
        first = self.targets[0]
        names = ", ".join(
            f"{h or '?'}: {(t.cmdline or 'pid ' + str(t.pid))[:60]}" for h, t in zip(hosts, self.targets)
        )
        started = min((t.started for t in self.targets if t.started), default=0.0)
        return TargetInfo(first.pid, f"{len(self.targets)} recordings merged ({names})",
                          first.python, first.torch, started)  # fmt: skip


def accuracy_of(reports: list[InputReport]) -> tuple[int | None, str]:
    """What alignment the output can claim, in µs (None: unknown) and in one line.

    The inputs' maxerror summed, while every clock was synchronised. An input shifted by
    ``--offset`` is aligned by the user, not by its clock: its maxerror says nothing about the
    offset's own error, so no bound is claimed; the line says whose judgement it is (and what
    the other inputs' clocks alone would give)."""
    given = [r for r in reports if r.offset_given]
    clocked = [r for r in reports if not r.offset_given]
    if given:
        names = ", ".join(os.path.basename(r.path) for r in given)
        rest = ""
        if len(clocked) > 1 and all(r.bound_us is not None for r in clocked):
            summed = sum(r.bound_us or 0 for r in clocked)
            rest = f" (the other inputs, on their clocks: ±{summed / 1000:.1f} ms)"
        return None, (
            f"aligned on wall clock, {names} shifted by hand (offset given by hand: "
            f"accuracy is yours to judge){rest}"
        )
    bounds = [r.bound_us for r in reports]
    if all(b is not None for b in bounds):
        summed = sum(b for b in bounds if b is not None)
        return summed, f"aligned on wall clock to ±{summed / 1000:.1f} ms (the inputs' maxerror summed)"
    why = "; ".join(f"{os.path.basename(r.path)}: {r.clock}" for r, b in zip(reports, bounds) if b is None)
    return None, f"aligned on wall clock; accuracy unknown — {why}"


def merge_recordings(paths: list[str], output: str, offsets: dict[int, float] | None = None) -> MergeResult:
    check_paths(paths, output)
    offsets = offsets or {}
    m = _Merger()
    reports: list[InputReport] = []
    for i, path in enumerate(paths):
        rec = read_recording(path)  # not a recording, a newer major: BadInputFile (exit 5)
        if not rec.events:
            raise BadInputFile(f"{path} holds no events", "is the recording empty (its writer killed at once)?")
        reports.append(m.add(path, rec.events, offsets.get(i, 0.0), rec.warning, i in offsets))
    m.finish()
    accuracy_us, accuracy = accuracy_of(reports)
    m.timed.sort(key=lambda x: (x[0], x[1]))
    t0 = m.timed[0][0] if m.timed else 0.0
    t1 = m.timed[-1][0] if m.timed else 0.0
    head: list[Event] = [m.target([r.host for r in reports]), StageRules(tuple(m.rules)), *m.defs]
    extra = {"inputs": str(len(paths)), "clock": "wall clock",
             "accuracy_us": "unknown" if accuracy_us is None else str(accuracy_us),
             "accuracy": accuracy}  # fmt: skip
    head.append(Marker(t0, MERGED, extra))
    events = head + [ev for _, _, ev in m.timed]
    writer = RecordingWriter(output)  # unwritable: UsageError (exit 2)
    try:
        for k in range(0, len(events), BATCH):
            writer.write(events[k : k + BATCH])
        failed = writer.failed
    finally:
        writer.close()
    if failed:
        try:
            os.unlink(output)
        except OSError:
            pass
        raise UsageError(f"cannot write {output}: {failed}")
    return MergeResult(output, tuple(reports), accuracy_us, accuracy, len(events), t1 - t0)
