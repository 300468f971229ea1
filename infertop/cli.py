"""Command line: one function per subcommand; errors become one message and an exit code."""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
import time
from collections.abc import Sequence

from infertop import __version__
from infertop.errors import EXIT_OK, EXIT_USAGE, InfertopError, UsageError

#: commands that collect: only their parsers name the agent's defaults (importing the agent
#: client costs `report` and the other file commands ~25 ms of start-up)
COLLECTING = ("attach", "run", "record", "demo")


def _agent_defaults():  # type: ignore[no-untyped-def]
    from infertop.collect.agent_client import AgentConfig

    return AgentConfig()

EPILOG = """\
examples:
  infertop demo                          live UI on the bundled sample service
  infertop attach 4242                   live UI on a running Python process
  infertop record 4242 -o incident.infertop --duration 60
  infertop replay incident.infertop      the same UI on a recording
  infertop report incident.infertop --format json
  infertop merge web1.infertop web2.infertop -o all.infertop   several hosts, one timeline

exit codes: 0 ok, 1 diff regression, 2 bad usage, 3 target not found / no permission,
            4 target unsupported, 5 unreadable input file
"""


MERGE_HELP = """\
Combine recordings made on different hosts (or of different services) into one
recording. Every input's processes become processes of the output (a recording made
without --children is one process: its target); pids and tids are renamed only where
two inputs share one; every event goes on one timeline. report, replay and export read
the result like any recording, and report gives a section per process (host and role)
beside the merged numbers.
"""

MERGE_EPILOG = """\
clock:
  Recordings hold each host's wall-clock (unix) time; the inputs are aligned on it.
  A recording notes its host and whether that host's clock was synchronised (NTP/PTP),
  with the kernel's maxerror. merge prints, per input, the host, the offset applied and
  that clock state, then how well the whole lines up: the inputs' maxerror summed, or
  unknown when a clock was not synchronised or a recording predates clock anchors.
  A host whose clock you know is S seconds ahead: --offset FILE=-S. An offset given by
  hand replaces that input's clock: merge then claims no bound (its accuracy is yours
  to judge) and says so.

examples:
  infertop merge web1.infertop web2.infertop -o incident.infertop
  infertop merge a.infertop b.infertop --offset b.infertop=-0.25 -o all.infertop
  infertop report incident.infertop

exit codes: 2 bad usage (fewer than two inputs, a file given twice, the output is an
            input, an output that cannot be written), 5 an input that is not a readable
            recording (not one, a newer format); a damaged input is used up to the damage,
            with a warning
"""


def _add_collect_flags(p: argparse.ArgumentParser, defaults) -> None:  # type: ignore[no-untyped-def]
    """``defaults``: the agent's AgentConfig, or None when this command's help is not shown."""
    window = f"{defaults.window_s:g} s" if defaults else "the agent's"
    period = f"{defaults.period_s:g} s" if defaults else "the agent's"
    p.add_argument(
        "--rate", type=float, metavar="HZ", help="py-spy samples per second (default 50)"
    )
    p.add_argument(
        "--stage",
        action="append",
        default=[],
        metavar="NAME=PATTERN",
        help="extra stage rule, repeatable; PATTERN is FUNC_GLOB or FILE_GLOB:FUNC_GLOB, "
        "e.g. --stage preprocess='*server.py:encode_batch'. Your rules win over the defaults.",
    )
    p.add_argument(
        "--config", metavar="FILE", help="TOML config with [collect], [stages] and [findings]"
    )
    p.add_argument(
        "--inject",
        action="store_true",
        help="inject the in-process agent (the default): torch ops, kernels, copies, allocator "
        "and stage latencies, from duty-cycled torch.profiler windows",
    )
    p.add_argument(
        "--no-inject",
        action="store_true",
        help="no in-process agent: py-spy (and NVML) only, nothing runs inside the target",
    )
    p.add_argument(
        "--profile-window",
        type=float,
        metavar="S",
        help=f"agent: length of each torch.profiler window (default {window})",
    )
    p.add_argument(
        "--profile-period",
        type=float,
        metavar="S",
        help=f"agent: one window every S seconds (default {period}); "
        "window/period is the share of time the profiler runs",
    )
    p.add_argument(
        "--record-shapes", action="store_true", help="agent: record input shapes (costs more)"
    )
    p.add_argument(
        "--children",
        action="store_true",
        help="also follow the target's child processes (and theirs), including ones that start "
        "later: Python ones are sampled, torch ones get the agent too",
    )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``command`` (when known) spares the others' agent defaults."""
    defaults = _agent_defaults() if command is None or command in COLLECTING else None
    parser = argparse.ArgumentParser(
        prog="infertop",
        description="See where a running PyTorch inference process spends its time: tokenizer, "
        "batching queue, model forward, host-device syncs, postprocessing, serialization.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"infertop {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("attach", help="live UI on a running process")
    p.add_argument(
        "pid", type=int, nargs="+",
        help="process id of the Python process; several PIDs (e.g. the workers of a pool) are "
        "one session, the first one the target",
    )  # fmt: skip
    p.add_argument("--record", metavar="FILE", help="also record the session to FILE")
    _add_collect_flags(p, defaults)

    p = sub.add_parser("run", help="start a command and open the live UI on it")
    p.add_argument("--record", metavar="FILE", help="also record the session to FILE")
    _add_collect_flags(p, defaults)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")

    p = sub.add_parser("record", help="record a process headless (no terminal needed)")
    p.add_argument("pid", type=int, nargs="+", help="process id(s), as for attach")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="recording to write")
    p.add_argument(
        "--duration", type=float, metavar="S", help="stop after S seconds (default: until Ctrl-C)"
    )
    _add_collect_flags(p, defaults)

    p = sub.add_parser("replay", help="the live UI on a recording, with a timeline")
    p.add_argument("file")
    p.add_argument("--stage", action="append", default=[], metavar="NAME=PATTERN")
    p.add_argument("--config", metavar="FILE")

    p = sub.add_parser("report", help="summary of a recording")
    p.add_argument("file")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.add_argument("--stage", action="append", default=[], metavar="NAME=PATTERN")
    p.add_argument("--config", metavar="FILE")

    p = sub.add_parser(
        "import",
        help="convert a torch.profiler (Kineto) trace into a recording for replay/report",
    )
    p.add_argument("trace", help="TRACE.json[.gz], or a directory of per-rank traces")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="recording to write")

    p = sub.add_parser(
        "export",
        help="a recording or trace as a Chrome/Perfetto trace, speedscope profiles or a Kineto trace",
        description="chrome: Trace Event Format JSON for Perfetto / chrome://tracing (gzip when OUT "
        "ends in .gz); speedscope: sampled CPU profiles per thread and per stage; kineto: the "
        "recording's torch.profiler windows as a trace for TensorBoard / Holistic Trace Analysis. "
        "See docs/export.md.",
    )
    p.add_argument("file", help="a recording, or a torch.profiler trace .json[.gz]")
    p.add_argument("--format", choices=("chrome", "speedscope", "kineto"), required=True)
    p.add_argument("-o", "--output", required=True, metavar="OUT")
    p.add_argument("--stage", action="append", default=[], metavar="NAME=PATTERN")
    p.add_argument("--config", metavar="FILE")

    p = sub.add_parser(
        "diff",
        help="compare two recordings or traces; exit 1 on a regression above --fail-above",
        description="Per-call latency (stage calls, ProfilerStep#N and other annotations) p50/p95, "
        "stage shares, GPU time per step, the ops, kernels and frames that moved most, findings "
        "new and gone. With --fail-above PCT: exit 1 when a latency, a stage share or GPU time "
        "per step grew more than PCT % (a CI gate, see docs/export.md).",
    )
    p.add_argument("base", help="the reference: a recording or a torch.profiler trace")
    p.add_argument("new", help="the candidate, of either kind")
    p.add_argument(
        "--fail-above", type=float, metavar="PCT",
        help="exit 1 when a gated number grew more than PCT %% (without it: report only, exit 0)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--stage", action="append", default=[], metavar="NAME=PATTERN")
    p.add_argument("--config", metavar="FILE")

    p = sub.add_parser(
        "merge",
        help="combine recordings from several hosts or services into one",
        description=MERGE_HELP,
        epilog=MERGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="recordings to merge (two or more)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="recording to write")
    p.add_argument(
        "--offset",
        action="append",
        default=[],
        metavar="FILE=SECONDS",
        help="shift FILE's times by SECONDS (repeatable); default 0: wall clock as recorded",
    )

    p = sub.add_parser("demo", help="start the bundled sample service and attach the live UI")
    p.add_argument("--record", metavar="FILE", help="also record the session to FILE")
    p.add_argument("--slow-tokenizer", action="store_true", help="make the sample's tokenizer slow")
    return parser


# -- helpers ----------------------------------------------------------------------------------
def _config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from infertop.config import load_config

    cfg = load_config(getattr(args, "config", None)).with_stage_args(args.stage)
    rate = getattr(args, "rate", None)
    if rate is not None:
        if not 1 <= rate <= 1000:
            raise UsageError(f"--rate {rate:g} is out of range", "use 1..1000 Hz (50, the default, costs the target ~2 %)")
        from dataclasses import replace

        cfg = replace(cfg, collect=replace(cfg.collect, rate_hz=rate))
    return cfg


def _targets(pids: Sequence[int]):  # type: ignore[no-untyped-def]
    """The session's target (the first pid) and the other target pids, each checked (a pid
    given twice counts once)."""
    from infertop.collect.target import inspect_target

    unique = list(dict.fromkeys(pids))
    target = inspect_target(unique[0])
    for pid in unique[1:]:
        inspect_target(pid)  # the same clear error for any pid that cannot be followed
    return target, unique[1:]


def _collectors(target, args: argparse.Namespace, cfg, others: Sequence[int] = ()):  # type: ignore[no-untyped-def]
    """py-spy and NVML, plus the agent (injected in the background) unless --no-inject; and the
    statuses to show for what does not run. ``others``: more target pids (attach PID PID...)."""
    from dataclasses import replace

    from infertop.collect.agent_attach import AgentAttach
    from infertop.collect.nvml import NvmlCollector
    from infertop.collect.pyspy import PySpyCollector
    from infertop.collect.targets import ManyTargets
    from infertop.model.events import CollectorStatus

    children = bool(getattr(args, "children", False))
    rate, window_s = cfg.collect.rate_hz, cfg.collect.window_s
    collectors: list = [
        ManyTargets([target.pid, *others], rate, window_s, children, cfg.collect.cpu_every)
        if others
        else PySpyCollector(
            target.pid, rate, window_s, children=children, cpu_every=cfg.collect.cpu_every
        ),
        # no GPU or no driver: it only says why, and runs nothing
        NvmlCollector(target.pid, others=others, children=children),
    ]
    statuses = []
    if getattr(args, "no_inject", False):
        statuses.append(CollectorStatus(time.time(), "agent", "unavailable", "off (--no-inject)"))
        return collectors, statuses
    agent = replace(_agent_defaults(), stage_functions=tuple(cfg.stage_rules))
    window, period = getattr(args, "profile_window", None), getattr(args, "profile_period", None)
    if window is not None:
        if not 0.1 <= window <= 10:
            raise UsageError(f"--profile-window {window:g} is out of range", "use 0.1..10 s")
        agent = replace(agent, window_s=window)
    if period is not None:
        if period < agent.window_s:
            raise UsageError("--profile-period must be at least --profile-window")
        agent = replace(agent, period_s=period)
    if getattr(args, "record_shapes", False):
        agent = replace(agent, record_shapes=True)
    collectors.append(AgentAttach(target.pid, agent, target))
    if children or others:
        from infertop.collect.child_agents import ChildAgents

        roots = [target.pid, *others]
        collectors.append(ChildAgents(roots, agent, extra_targets=list(others), children=children))
    return collectors, statuses


def _need_tty(what: str) -> None:
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        raise UsageError(
            f"{what} needs a terminal",
            "for a headless session use `infertop record PID -o FILE --duration S`",
        )


def _live(target, args, record: str | None, others: Sequence[int] = ()) -> int:  # type: ignore[no-untyped-def]
    from infertop.sources import LiveSource
    from infertop.tui.app import create_app

    cfg = _config(args)
    collectors, statuses = _collectors(target, args, cfg, others)
    src = LiveSource(target, cfg, collectors=collectors, record_path=record, statuses=statuses)
    title = f"infertop — pid {target.pid}" + "".join(f", {p}" for p in others)
    try:
        create_app(src, title=title).run()  # its ingest worker starts and stops the source
    finally:
        src.stop()  # idempotent; covers an app that failed before its worker ran
    for path in src.recorded:
        print(f"recording written to {path}", file=sys.stderr)
    return EXIT_OK


# -- subcommands ------------------------------------------------------------------------------
def cmd_attach(args: argparse.Namespace) -> int:
    _need_tty("attach")
    target, others = _targets(args.pid)
    return _live(target, args, args.record, others)


def _start_child(cmd: Sequence[str], log_path: str, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    import subprocess

    # the child arms the agent at start-up: our sitecustomize (first on its path) imports
    # infertop.agent when INFERTOP_AGENT=1, so nothing has to be injected later
    import infertop

    pkg_parent = os.path.dirname(os.path.dirname(infertop.__file__))
    site_dir = os.path.join(pkg_parent, "infertop", "agent", "_site")
    path = os.pathsep.join(p for p in (site_dir, pkg_parent, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    if not getattr(args, "no_inject", False):
        env["INFERTOP_AGENT"] = "1"
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(
            list(cmd), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
            preexec_fn=_own_group_and_term_with_parent,
        )  # fmt: skip
    except FileNotFoundError:
        raise UsageError(f"command not found: {cmd[0]}") from None
    except PermissionError:
        raise UsageError(f"cannot execute {cmd[0]}: permission denied") from None
    finally:
        log.close()


def _own_group_and_term_with_parent() -> None:
    """In a child of `run`/`demo`: out of the terminal's Ctrl-C (own process group, same session
    so py-spy and the target share a scheduler autogroup), and SIGTERM if infertop dies."""
    import ctypes

    os.setpgid(0, 0)
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _wait_attachable(proc, log_path: str, timeout: float = 15.0):  # type: ignore[no-untyped-def]
    """py-spy can read a child only once its interpreter is up: retry until it can."""
    from infertop.collect.target import inspect_target
    from infertop.errors import TargetNotFound, TargetUnsupported

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise TargetNotFound(
                f"the command exited (code {proc.returncode}) before infertop could attach",
                f"its output is in {log_path}",
            )
        try:
            return inspect_target(proc.pid)
        except (TargetNotFound, TargetUnsupported):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _stop_child(proc) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _run_child(cmd: Sequence[str], args: argparse.Namespace, log_path: str) -> int:
    proc = _start_child(cmd, log_path, args)
    try:
        target = _wait_attachable(proc, log_path)
        return _live(target, args, args.record)
    finally:
        _stop_child(proc)
        print(f"the command's output is in {log_path}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UsageError("no command given", "infertop run -- python server.py --port 8000")
    _need_tty("run")
    return _run_child(cmd, args, f"infertop-run-{int(time.time())}.log")


def cmd_demo(args: argparse.Namespace) -> int:
    import tempfile

    _need_tty("demo")
    args.stage, args.config, args.rate, args.no_inject, args.inject = [], None, None, False, False
    args.profile_window = args.profile_period = None
    args.record_shapes = False
    cmd = [sys.executable, "-m", "samples.textgen_service"]
    if args.slow_tokenizer:
        cmd.append("--slow-tokenizer")
    log_path = os.path.join(tempfile.gettempdir(), f"infertop-demo-{os.getpid()}.log")
    return _run_child(cmd, args, log_path)


def cmd_record(args: argparse.Namespace) -> int:
    from infertop.headless import record_headless

    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive")
    target, others = _targets(args.pid)
    cfg = _config(args)
    collectors, statuses = _collectors(target, args, cfg, others)
    return record_headless(target, cfg, args.output, args.duration, collectors, statuses)


def cmd_replay(args: argparse.Namespace) -> int:
    from infertop.record.reader import read_recording
    from infertop.sources import ReplaySource

    rec = read_recording(args.file)
    _need_tty("replay")
    from infertop.tui.app import create_app

    src = ReplaySource(rec, _config(args))
    create_app(src, title=f"infertop — replay {os.path.basename(args.file)}").run()
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    prefetch = None
    if args.file.endswith((".json", ".json.gz")) and os.path.isfile(args.file):
        from infertop.trace.files import Prefetch

        prefetch = Prefetch(args.file)  # read + gunzip on another core while modules import
    from infertop.trace.files import is_trace_path

    if is_trace_path(args.file):
        from infertop.report.trace import build_ranks_report, build_trace_report, render_trace_text

        data = prefetch.take() if prefetch is not None else None
        ranks = build_ranks_report(args.file, _config(args))  # None: not a directory of ranks
        rep = ranks if ranks is not None else build_trace_report(args.file, _config(args).findings, data)
        if args.format == "json":
            sys.stdout.write(json.dumps(rep, indent=2) + "\n")
        else:
            sys.stdout.write(render_trace_text(rep, markdown=args.format == "markdown"))
        return EXIT_OK
    from infertop.analysis.snapshot import build_snapshot
    from infertop.record.reader import read_recording
    from infertop.report.build import build_report
    from infertop.report.processes import add_processes
    from infertop.report.text import render_markdown, render_text
    from infertop.sources import ReplaySource

    rec = read_recording(args.file)
    if rec.warning:
        print(f"infertop: warning: {rec.warning}", file=sys.stderr)
    src = ReplaySource(rec, _config(args))
    snap = build_snapshot(src.session, t=src.t, notes=src.notes)
    rep = build_report(snap, "recording", args.file, _config(args).findings)
    add_processes(rep, src.session, src.t, _config(args).findings)  # None: one process
    if args.format == "json":
        sys.stdout.write(json.dumps(rep, indent=2) + "\n")
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(rep))
    else:
        sys.stdout.write(render_text(rep))
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from infertop.record.importer import import_trace

    tty = sys.stderr.isatty()

    def progress(text: str) -> None:
        if tty:
            sys.stderr.write(f"\rinfertop: {text[:100]}\033[K")
            sys.stderr.flush()

    try:
        res = import_trace(args.trace, args.output, progress)
    finally:
        if tty:
            sys.stderr.write("\r\033[K")
    for line in (res.note or "").splitlines():
        print(f"infertop: {line}", file=sys.stderr)
    print(
        f"infertop: imported {res.trace}: {res.events:,} events, {res.seconds:.2f} s, "
        f"{res.windows} windows -> {res.output}",
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    from infertop.record.merge import check_paths, merge_recordings, parse_offsets

    check_paths(args.files, args.output)
    res = merge_recordings(args.files, args.output, parse_offsets(args.offset, args.files))
    for r in res.inputs:
        n = len(r.processes)
        print(
            f"infertop: {r.path}: host {r.host or 'unknown'}, {n} process{'es' if n > 1 else ''} "
            f"(pid {', '.join(map(str, r.processes[:6]))}{', ...' if n > 6 else ''}), "
            f"offset {r.offset_s:+.3f} s{' (given by hand)' if r.offset_given else ''}, {r.clock}",
            file=sys.stderr,
        )
        if r.warning:
            print(f"infertop: warning: {r.warning}", file=sys.stderr)
    print(f"infertop: {res.accuracy}", file=sys.stderr)
    print(
        f"infertop: merged {len(res.inputs)} recordings: {res.events:,} events, "
        f"{res.seconds:.1f} s -> {res.output}",
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from infertop.export.run import export

    res = export(args.file, args.format, args.output, _config(args))
    if res.warning:
        print(f"infertop: warning: {res.warning}", file=sys.stderr)
    print(f"infertop: wrote {res.output} ({res.events:,} events, {args.format})", file=sys.stderr)
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    from infertop.compare.diff import as_json, compare
    from infertop.compare.profile import load_profile
    from infertop.compare.render import render_text
    from infertop.errors import EXIT_REGRESSION

    if args.fail_above is not None and not args.fail_above >= 0:
        raise UsageError(f"--fail-above {args.fail_above:g} must be a percentage >= 0")
    cfg = _config(args)
    res = compare(load_profile(args.base, cfg), load_profile(args.new, cfg), args.fail_above)
    if args.format == "json":
        sys.stdout.write(json.dumps(as_json(res), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(res))
    return EXIT_REGRESSION if res.regressions else EXIT_OK


COMMANDS = {
    "attach": cmd_attach,
    "run": cmd_run,
    "record": cmd_record,
    "replay": cmd_replay,
    "report": cmd_report,
    "import": cmd_import,
    "export": cmd_export,
    "merge": cmd_merge,
    "diff": cmd_diff,
    "demo": cmd_demo,
}


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _drop_stdout() -> None:
    """After a failed write to stdout: point it at /dev/null so that the interpreter's final
    flush of what is still buffered does not fail a second time at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(next((w for w in words if not w.startswith("-")), None))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    for sig in (signal.SIGTERM, signal.SIGHUP):  # close recordings and children on the way out
        signal.signal(sig, _interrupt)
    # Ctrl-C / kill -INT stops `record` and writes the recording even where infertop was started
    # with SIGINT ignored (a script's background job: `infertop record ... &`), which Python
    # would otherwise keep
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc = COMMANDS[args.command](args)
        sys.stdout.flush()  # a full disk behind a redirect shows here, not after we return
        return rc
    except InfertopError as exc:
        if args.debug:
            raise
        print(f"infertop: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug: one line, not a traceback, unless --debug
        if args.debug:
            raise
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
            _drop_stdout()  # not a bug: the output has nowhere to go
            print(f"infertop: cannot write the output: {exc.strerror}", file=sys.stderr)
            return EXIT_USAGE
        print(
            f"infertop: internal error: {type(exc).__name__}: {exc} (run with --debug for details)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
