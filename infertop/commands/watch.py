"""``infertop watch PID... --out DIR``: the headless flight recorder (docs/watch.md)."""

from __future__ import annotations

import argparse
import os
import signal
import time
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.commands.common import add_collect_flags, add_json_flag, targets
from infertop.commands.push_flags import add_push_flags, push_options
from infertop.errors import UsageError

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig

DESCRIPTION = """\
Watch a process for hours at the default cost, keep the last --before seconds in memory, and
when a trigger fires write DIR/incident-<UTC time>.infertop: those seconds and the next
--after ones, a normal recording (report, replay, export, diff). One line on stdout per
incident; a status line on stderr. On a trigger the agent also takes a torch.profiler window
at once and NVML is read 5x as often for the --after seconds.

triggers (over stage calls: infertop.stage annotations, and the calls the agent times: a
model's forward, tokenizers, json.dumps, requests, --stage functions; watch says which stages
have none):
  auto (the default)    a stage's p95 over the last 2 s above 2× its p95 over the 60 s
                        before, with more slow calls than the stage's own mix makes likely,
                        or its call rate under half of its 60 s rate; it waits for 20 s of a
                        stage's calls and enough of them, so a steady load (a rare slow path
                        included) never fires
  STAGE.METRIC>TIME     forward.p99>250ms, preprocess.p95>40ms, decode.max>1s
                        (METRIC: p50, p95, p99, any pNN, max, mean; TIME in us, ms or s)
  STAGE.rate<N/s        forward.rate<5/s: fewer calls than that (also /min)
  kill -USR1 WATCH_PID  an incident now (manual capture; not held back by the cooldown)
Rules are evaluated over the last --trigger-window seconds; --trigger is repeatable, and
'auto' may be given beside rules. At most one incident per --cooldown; after
--max-incidents, watch says so and stops (detaching, exit 0)."""

EPILOG = """\
examples:
  infertop watch 4242 --out /var/tmp/incidents
  infertop watch 4242 --out inc --trigger 'forward.p99>250ms' --trigger 'forward.rate<5/s'
  infertop watch 4242 --out inc --trigger auto --trigger 'preprocess.p95>40ms' --before 60
  infertop watch 4242 --out inc --stage preprocess='*server.py:tokenize_batch'
  infertop watch --match '*serve.py*' --out inc --push http://pyroscope:4040
                                        every serve.py on the host, now and later
  kill -USR1 <pid of watch>             write an incident now
  infertop report inc/incident-20261202T074103Z.infertop

stdout, one line per incident:
  2026-12-02T07:41:03Z  forward.p95 212 ms > 2× 60 s p95 (98 ms)  → inc/incident-20261202T074103Z.infertop
Ctrl-C or SIGTERM: an incident being written is closed with what it has, the agent detached,
exit 0. The target exiting ends watch too (with --match: never; exited ones are dropped)."""


def _positive(name: str, value: float | None, lo: float, hi: float) -> None:
    if value is not None and not lo <= value <= hi:
        raise UsageError(f"{name} {value:g} is out of range", f"use {lo:g}..{hi:g}")


def add_arguments(p: argparse.ArgumentParser, agent: AgentConfig | None) -> None:
    p.add_argument("pid", type=int, nargs="*", help="process id(s), as for attach")
    p.add_argument(
        "--match", metavar="PATTERN",
        help="instead of pids: every Python process whose command line matches, running now or "
        "started later (exited ones are dropped): a glob on the whole command line "
        "('*serve.py*') or /REGEX/ ('/uvicorn .*app:api/')",
    )  # fmt: skip
    p.add_argument(
        "--out", required=True, metavar="DIR", help="where incidents go (created if missing)"
    )
    p.add_argument(
        "--trigger",
        action="append",
        default=[],
        metavar="RULE",
        help="auto (the default), or a rule such as 'forward.p99>250ms' or 'forward.rate<5/s'; "
        "repeatable",
    )
    p.add_argument(
        "--before", type=float, default=30.0, metavar="S",
        help="seconds before the trigger an incident holds (default 30)",
    )  # fmt: skip
    p.add_argument(
        "--after", type=float, default=10.0, metavar="S",
        help="seconds after the trigger an incident holds (default 10)",
    )  # fmt: skip
    p.add_argument(
        "--trigger-window", type=float, default=2.0, metavar="S",
        help="the triggers look at the last S seconds of calls (default 2)",
    )  # fmt: skip
    p.add_argument(
        "--cooldown", type=float, default=60.0, metavar="S",
        help="at most one incident per S seconds (default 60)",
    )  # fmt: skip
    p.add_argument(
        "--max-incidents", type=int, default=20, metavar="N",
        help="stop after writing N incidents (default 20): bounded disk use",
    )  # fmt: skip
    p.add_argument(
        "--duration", type=float, metavar="S", help="stop after S seconds (default: until Ctrl-C)"
    )
    p.add_argument(
        "--oom-snapshot", action="store_true",
        help="on a CUDA out-of-memory error in the target, write PyTorch's memory snapshot "
        "(the allocator's segments and blocks at that moment) to DIR/oom-snapshot-<UTC "
        "time>.pickle: open it at https://pytorch.org/memory_viz (docs/memory-snapshot.md)",
    )  # fmt: skip
    add_json_flag(p)
    add_collect_flags(p, agent)
    add_push_flags(p)


def _triggers(texts: list[str]) -> tuple[bool, tuple]:
    """(auto, rules) from the --trigger values; a bad rule is one usage error."""
    from infertop.analysis.triggers import RuleError, parse_rule  # here: only watch needs it

    auto = not texts
    rules = []
    for text in texts:
        if text.strip() == "auto":
            auto = True
            continue
        try:
            rules.append(parse_rule(text))
        except RuleError as exc:
            raise UsageError(str(exc)) from None
    return auto, tuple(rules)


def out_dir(path: str) -> str:
    """``--out``, created if missing and checked writable: one clear error otherwise."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --out {path}: {exc.strerror or exc}") from None
    probe = os.path.join(path, f".infertop-watch-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(
            f"cannot write incidents to {path}: {exc.strerror or exc}",
            "give --out a directory you can write to",
        ) from None
    return path


def _match(args: argparse.Namespace) -> str | None:
    """``--match``, checked: it or pids, not both, not neither."""
    if args.match is None:
        if not args.pid:
            raise UsageError("watch needs a PID or --match PATTERN",
                             "e.g. infertop watch 4242 --out inc, or --match '*serve.py*'")  # fmt: skip
        return None
    if args.pid:
        raise UsageError("give pids or --match, not both")
    text = args.match.strip()
    if not text or text in ("*", "//"):
        raise UsageError(f"--match {args.match!r} would match every process",
                         "match the service's command line, e.g. --match '*serve.py*'")  # fmt: skip
    import re

    from infertop.collect.matched import Pattern  # here: the collectors load only when watch runs

    try:
        Pattern(text)
    except re.error as exc:
        raise UsageError(f"--match {text}: not a regular expression ({exc})") from None
    return text


def run(args: argparse.Namespace) -> int:
    # imported here: the collectors, the ring and the writer load only when watch runs
    from dataclasses import replace

    from infertop.commands.wiring import CollectOptions, build_collectors
    from infertop.model.events import TargetInfo
    from infertop.watch.loop import Watch, WatchOptions

    # a kill -USR1 that comes while watch starts (pid checks, the collectors) must not end it
    # (SIGUSR1's default): ignored until the loop takes it over
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    auto, rules = _triggers(args.trigger)
    _positive("--before", args.before, 0.5, 3600)
    _positive("--after", args.after, 0, 3600)
    _positive("--trigger-window", args.trigger_window, 0.25, 600)
    _positive("--cooldown", args.cooldown, 0, 86400)
    if args.max_incidents < 1:
        raise UsageError("--max-incidents must be at least 1")
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive")
    opts = WatchOptions(
        out_dir=out_dir(args.out),
        before=args.before,
        after=args.after,
        rules=rules,
        auto=auto,
        window_s=args.trigger_window,
        cooldown=args.cooldown,
        max_incidents=args.max_incidents,
        duration=args.duration,
        as_json=args.json,
    )
    push = push_options(args)
    match = _match(args)
    others: list[int]
    if match is not None:
        target, others = TargetInfo(None, f"--match {match}", started=time.time()), []
    else:
        target, others = targets(args.pid)
    collect = CollectOptions.from_args(args)
    if args.oom_snapshot:
        collect = replace(collect, oom_snapshot_dir=opts.out_dir)
    cfg = collect.load_config()
    collectors, statuses = build_collectors(target, collect, cfg, others, match)
    return Watch(target, cfg, opts, collectors, statuses, push=push).run()


COMMAND = Command(
    "watch",
    "headless flight recorder: write an incident when a trigger fires",
    add_arguments,
    run,
    description=DESCRIPTION,
    epilog=EPILOG,
    raw_text=True,
    collecting=True,
)
