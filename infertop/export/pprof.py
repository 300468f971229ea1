"""``infertop export FILE --format pprof | pprof-ops``: gzipped pprof profiles (profile.proto)
for ``go tool pprof``, Pyroscope, Parca and the other tools that read them (docs/export.md).

``pprof``: the recording's CPU samples. Sample types ``samples/count`` and ``cpu/nanoseconds``
(samples × the window's sample period), one location per Python frame (function, file, line),
sample labels ``stage``, ``thread`` and, in a recording of several processes, ``process``
(``pid N ROLE``, the role as ``report`` names it).

``pprof-ops``: the torch-profiler windows (the agent's, or a torch.profiler trace's). Stacks
are op call paths, outermost first down to the kernel or copy an op launched; values
``calls/count``, ``cpu_time/nanoseconds`` (an op's self time on the host) and
``device_time/nanoseconds`` (a kernel's or copy's time on the device); labels ``stage``,
``device`` and ``process``. A torch.profiler trace has no Python samples, so ``pprof`` of a
trace is its ops profile too.
"""

from __future__ import annotations

import os

from infertop import __version__
from infertop.analysis.processes.shares import roles as process_roles
from infertop.analysis.stages import StageClassifier
from infertop.config import Config
from infertop.export.jsonout import JsonStream
from infertop.export.prelude import ExportResult, scan_recording
from infertop.model.events import FrameDef, OpWindow, ProcessDef, SampleWindow, StackDef, ThreadDef
from infertop.model.pprof_build import NS, CpuProfile, ProfileBuilder, program_name
from infertop.model.symbols import SymbolTable
from infertop.record.import_kineto import read_windows
from infertop.record.reader import read_recording
from infertop.record.stream import RecordingStream
from infertop.sources import ReplaySource
from infertop.words import plural


def export_pprof(path: str, out: str, config: Config, trace: bool) -> ExportResult:
    if trace:
        return export_pprof_ops(path, out, config, trace=True)
    stream = RecordingStream(path)
    processes: dict[int, ProcessDef] = {}
    t0, recorded_rules, target = scan_recording(stream, processes)
    classifier = StageClassifier(tuple(config.stage_rules) + tuple(recorded_rules))
    role = _roles(path, config) if len(processes) > 1 else {}
    main_pid = target.pid or 0
    symbols = SymbolTable()
    threads: dict[int, tuple[str, int]] = {}  # tid -> (name, pid)
    end = t0
    prof: CpuProfile | None = None
    total = 0

    def thread_of(tid: int) -> str:
        name = threads.get(tid, ("", 0))[0]
        return f"{name} ({tid})" if name else str(tid)

    def process_of(tid: int) -> str:
        pid = threads.get(tid, ("", 0))[1] or main_pid
        return f"pid {pid} {role.get(pid, '')}".rstrip()

    for ev in stream:
        match ev:
            case FrameDef() | StackDef():
                symbols.learn(ev)
            case ThreadDef():
                threads[ev.tid] = (ev.name, ev.pid)
            case SampleWindow():
                end = max(end, ev.t_end)  # the profile spans the sampling, wall windows too
                if ev.idle:  # a wall window; the CPU windows hold the samples of work
                    continue
                if prof is None:
                    prof = CpuProfile(ev.rate_hz or 100.0, program_name(target.cmdline))
                total += prof.add_window(
                    ev, symbols.frames, symbols.stacks, classifier.stage_of, thread_of,
                    process_of if role else None,
                )  # fmt: skip
    rate = prof.rate_hz if prof is not None else 0.0
    if prof is None:
        prof = CpuProfile(100.0)
    n = prof.samples
    comments = [f"infertop {__version__}: CPU samples of {os.path.basename(path)}"]
    if rate:
        comments.append(f"sampled at {rate:g} Hz")
    _write(out, prof.encode(t0, end, comments))
    warning = stream.warning
    if total == 0 and warning is None:
        warning = (
            f"{path} holds no CPU samples (an imported trace, or a session too short to sample); "
            "--format pprof-ops writes its torch-profiler windows"
        )
    return ExportResult(out, n, warning)


def _roles(path: str, cfg: Config) -> dict[int, str]:
    """pid -> role, as ``report`` names the processes of a many-process recording."""
    src = ReplaySource(read_recording(path), cfg)
    return process_roles(src.session)


def export_pprof_ops(path: str, out: str, config: Config, trace: bool) -> ExportResult:
    """The op profile; ``config`` is not read: the processes' roles are named with the
    defaults."""
    if trace:
        _plan, windows = read_windows(path, lambda _msg: None)
        warning = None
        processes: dict[int, ProcessDef] = {}
        program = "python"
    else:
        stream = RecordingStream(path)
        processes = {}
        _t0, _rules, target = scan_recording(stream, processes)
        windows = [ev for ev in stream if isinstance(ev, OpWindow)]
        warning = stream.warning
        program = program_name(target.cmdline)
    role = _roles(path, Config()) if len(processes) > 1 else {}
    b = ProfileBuilder(
        (("calls", "count"), ("cpu_time", "nanoseconds"), ("device_time", "nanoseconds")),
        ("cpu_time", "nanoseconds"),
        1,
        program,
    )
    for w in windows:
        for p in w.paths:
            if not p.names:
                continue
            dev = p.device == "cuda"
            locs = tuple(
                b.location(name, "[device]" if dev and i == len(p.names) - 1 else "[torch]")
                for i, name in reversed(list(enumerate(p.names)))
            )
            labels: tuple[tuple[str, str], ...] = (("stage", p.stage), ("device", p.device))
            if role:
                labels += (("process", f"pid {w.pid} {role.get(w.pid, '')}".rstrip()),)
            ns = p.self_us * 1000
            b.add(locs, (p.count, 0 if dev else ns, ns if dev else 0), labels)
    start = min((w.t_start for w in windows), default=0.0)
    end = max((w.t_end for w in windows), default=start)
    comments = [
        f"infertop {__version__}: torch-profiler windows of {os.path.basename(path)}",
        f"{len(windows)} {plural(len(windows), 'window')}",
    ]
    n = b.samples
    _write(out, b.encode(round(start * NS), round((end - start) * NS), comments, "cpu_time"))
    return ExportResult(out, n, warning)


def _write(out: str, data: bytes) -> None:
    doc = JsonStream(out, compress=False)  # ``data`` is gzipped already
    try:
        doc.write(data)
        doc.commit()
    except BaseException:
        doc.abort()
        raise
