"""The collecting commands' options, the collectors built from them, and the live UI.

Imported only when attach, run, record or demo runs: the collectors (and ``dataclasses``)
are not needed to parse the command line.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from infertop.collect.base import Collector
from infertop.commands.common import agent_defaults, load_cfg
from infertop.errors import EXIT_OK, UsageError
from infertop.model.events import CollectorStatus, TargetInfo

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig
    from infertop.config import Config


@dataclass(frozen=True)
class CollectOptions:
    """What a collecting command was asked for: the flags of ``common.add_collect_flags``.
    The defaults are those of a command line that gives none of them (``demo``)."""

    config: str | None = None
    stages: tuple[str, ...] = ()
    generate: tuple[str, ...] = ()  # --generate PATTERN
    slow: tuple[str, ...] = ()  # --slow STAGE=MS
    rate: float | None = None  # py-spy's Hz; None: the config's
    inject: bool = True  # False: --no-inject
    profile_window: float | None = None  # None: the agent's default
    profile_period: float | None = None
    record_shapes: bool = False
    profile_memory: bool = False  # --profile-memory
    call_samples: float | None = None  # None: the agent's default
    children: bool = False
    oom_snapshot_dir: str | None = None  # watch --oom-snapshot: its --out

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CollectOptions:
        """The one place these options are read off a parsed command line."""
        return cls(
            config=args.config,
            stages=tuple(args.stage),
            generate=tuple(args.generate),
            slow=tuple(args.slow),
            rate=args.rate,
            inject=not args.no_inject,
            profile_window=args.profile_window,
            profile_period=args.profile_period,
            record_shapes=args.record_shapes,
            profile_memory=getattr(args, "profile_memory", False),
            call_samples=args.call_samples,
            children=args.children,
        )

    def load_config(self) -> Config:
        return load_cfg(self.config, self.stages, self.rate, self.slow, self.generate)


def build_collectors(
    target: TargetInfo,
    opts: CollectOptions,
    cfg: Config,
    others: Sequence[int] = (),
    match: str | None = None,
) -> tuple[list[Collector], list[CollectorStatus]]:
    """py-spy and NVML, plus the agent (injected in the background) unless --no-inject; and the
    statuses to show for what does not run. ``others``: more target pids (attach PID PID...);
    ``match``: every process whose command line matches, now and later (watch --match), instead
    of pids."""
    # imported here: a command that fails its checks first (no terminal, a bad pid) exits
    # without loading the collectors
    from infertop.collect.agent.attach import AgentAttach
    from infertop.collect.host_memory import HostMemoryCollector
    from infertop.collect.many_targets import ManyTargets
    from infertop.collect.nvml import NvmlCollector
    from infertop.collect.pyspy import PySpyCollector

    children = opts.children
    rate, window_s = cfg.collect.rate_hz, cfg.collect.window_s
    if match is not None:
        return _matched_collectors(match, opts, cfg)
    pid = target.pid
    if pid is None:  # only watch --match starts without a process
        raise ValueError("build_collectors: a target without a pid and no match")
    collectors: list[Collector] = [
        ManyTargets([pid, *others], rate, window_s, children, cfg.collect.cpu_every,
                    realtime=cfg.collect.realtime)  # fmt: skip
        if others
        else PySpyCollector(
            pid, rate, window_s, children=children, cpu_every=cfg.collect.cpu_every,
            realtime=cfg.collect.realtime,
        ),
        # no GPU or no driver: it only says why, and runs nothing
        NvmlCollector(pid, others=others, children=children),
        # /proc and the memory cgroup, once a second: nothing runs in the target
        HostMemoryCollector(pid, others=others, children=children),
    ]
    statuses: list[CollectorStatus] = []
    if not opts.inject:
        statuses.append(CollectorStatus(time.time(), "agent", "unavailable", "off (--no-inject)"))
        return collectors, statuses
    agent = agent_config(opts, cfg)
    collectors.append(AgentAttach(pid, agent, target))
    if children or others:
        # imported here: only sessions of several processes need it
        from infertop.collect.agent.children import ChildAgents

        roots = [pid, *others]
        collectors.append(ChildAgents(roots, agent, extra_targets=list(others), children=children))
    return collectors, statuses


def _matched_collectors(
    match: str, opts: CollectOptions, cfg: Config
) -> tuple[list[Collector], list[CollectorStatus]]:
    """``watch --match``: one sampler per matching process, the agents and NVML following the
    same list of pids as it changes."""
    from infertop.collect.agent.children import ChildAgents
    from infertop.collect.host_memory import HostMemoryCollector
    from infertop.collect.matched import MatchedTargets, Pattern
    from infertop.collect.nvml import NvmlCollector

    matched = MatchedTargets(Pattern(match), cfg.collect.rate_hz, cfg.collect.window_s,
                             opts.children, cfg.collect.cpu_every,
                             realtime=cfg.collect.realtime)  # fmt: skip
    nvml = NvmlCollector(None, children=opts.children)
    nvml.follow(matched.pids)
    memory = HostMemoryCollector(None, children=opts.children)
    memory.follow(matched.pids)
    collectors: list[Collector] = [matched, nvml, memory]
    if not opts.inject:
        status = CollectorStatus(time.time(), "agent", "unavailable", "off (--no-inject)")
        return collectors, [status]
    agents = ChildAgents([], agent_config(opts, cfg), children=opts.children)
    agents.follow(matched.pids)
    collectors.append(agents)
    return collectors, []


def agent_config(opts: CollectOptions, cfg: Config) -> AgentConfig:
    """The agent's settings: the defaults, the stage rules' functions, the flags (checked)."""
    agent = replace(
        agent_defaults(),
        stage_functions=tuple(cfg.stage_rules),
        generate_functions=cfg.generate_functions,
    )
    window, period = opts.profile_window, opts.profile_period
    if window is not None:
        if not 0.1 <= window <= 10:
            raise UsageError(f"--profile-window {window:g} is out of range", "use 0.1..10 s")
        agent = replace(agent, window_s=window)
    if period is not None:
        if period < agent.window_s:
            raise UsageError("--profile-period must be at least --profile-window")
        agent = replace(agent, period_s=period)
    if opts.record_shapes:
        agent = replace(agent, record_shapes=True)
    if opts.profile_memory:
        agent = replace(agent, profile_memory=True)
    if opts.call_samples is not None:
        if not 0 <= opts.call_samples <= 1000:
            raise UsageError(
                f"--call-samples {opts.call_samples:g} is out of range", "use 0..1000 Hz"
            )
        agent = replace(agent, call_sample_hz=opts.call_samples)
    if opts.oom_snapshot_dir:
        agent = replace(agent, oom_snapshot_dir=opts.oom_snapshot_dir)
    return agent


def live(
    target: TargetInfo, opts: CollectOptions, record: str | None, others: Sequence[int] = ()
) -> int:
    """The live UI on ``target`` (and ``others``), recording to ``record`` when given."""
    # imported here: Textual and the sources load only for the live UI (record needs neither)
    from infertop.sources import LiveSource
    from infertop.tui.app import create_app

    cfg = opts.load_config()
    collectors, statuses = build_collectors(target, opts, cfg, others)
    src = LiveSource(target, cfg, collectors=collectors, record_path=record, statuses=statuses)
    title = f"infertop — pid {target.pid}" + "".join(f", {p}" for p in others)
    try:
        create_app(src, title=title).run()  # its ingest worker starts and stops the source
    finally:
        src.stop()  # idempotent; covers an app that failed before its worker ran
    for path in src.recorded:
        print(f"recording written to {path}", file=sys.stderr)
    return EXIT_OK
