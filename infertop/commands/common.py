"""What several commands share: flags, the config they read, the pids they follow, a terminal.

Building the parser must stay cheap (every command's parser is built on every run), so the
modules behind these helpers are imported where a helper runs, not here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from infertop.errors import UsageError

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig
    from infertop.config import Config
    from infertop.model.events import TargetInfo


def agent_defaults() -> AgentConfig:
    # imported here: the agent client (sockets, the event model) costs the file commands
    # ~25 ms of start-up
    from infertop.collect.agent.client import AgentConfig

    return AgentConfig()


# -- flags --------------------------------------------------------------------------------
def add_config_flags(p: argparse.ArgumentParser) -> None:
    """``--stage`` and ``--config`` of the commands that read a file (no help of their own)."""
    p.add_argument("--stage", action="append", default=[], metavar="NAME=PATTERN")
    p.add_argument("--config", metavar="FILE")
    add_slow_flag(p)


def add_slow_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--slow",
        action="append",
        default=[],
        metavar="STAGE=MS",
        help="the tail view's slow calls of STAGE: those of MS or more (default: its p99), "
        "repeatable, e.g. --slow preprocess=40",
    )


def add_record_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record", metavar="FILE", help="also record the session to FILE")


def add_json_flag(p: argparse.ArgumentParser) -> None:
    """``--json`` of the headless commands (record, watch)."""
    p.add_argument(
        "--json", action="store_true",
        help="progress, warnings and the end as JSON lines on stderr (for a supervisor or a "
        "log pipeline), the push's counts in them",
    )  # fmt: skip


def add_collect_flags(p: argparse.ArgumentParser, defaults: AgentConfig | None) -> None:
    """The flags of the commands that collect. ``defaults``: the agent's AgentConfig, or None
    when this command's help is not shown."""
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
        "--generate",
        action="append",
        default=[],
        metavar="PATTERN",
        help="a function of yours that is one generation call (a hand-written decode loop), "
        "repeatable; FUNC_GLOB or FILE_GLOB:FUNC_GLOB, e.g. --generate '*server.py:generate_tokens'. "
        "Each call's time to first token, time per token, batch and tokens (Python >= 3.10), "
        "the prefill until its model's second forward begins. Hugging Face generate needs none.",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config with [collect], [stages], [generate] and [findings]",
    )
    add_slow_flag(p)
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
        "--profile-memory",
        action="store_true",
        help="agent: every other profiler window is one model call profiled with profile_memory "
        "(the bytes each op and stage allocates, the peak per call; docs/agent-protocol.md)",
    )
    hz = f"{defaults.call_sample_hz:g}" if defaults else "the agent's"
    p.add_argument(
        "--call-samples",
        type=float,
        metavar="HZ",
        help=f"agent: stacks a second of the threads inside stage calls, which tie stacks to "
        f"calls for the tail view (default {hz}; 0: off)",
    )
    p.add_argument(
        "--children",
        action="store_true",
        help="also follow the target's child processes (and theirs), including ones that start "
        "later: Python ones are sampled, torch ones get the agent too",
    )


# -- running ------------------------------------------------------------------------------
def load_cfg(
    config: str | None, stages: Sequence[str], rate: float | None = None, slow: Sequence[str] = (),
    generate: Sequence[str] = (),
) -> Config:  # fmt: skip
    """The config file (or the defaults), the ``--stage`` rules, the ``--slow`` thresholds and,
    for the commands that collect, ``--rate`` and ``--generate``."""
    # imported here: dataclasses and the config module (TOML) would cost every command start-up
    from dataclasses import replace

    from infertop.config import load_config

    cfg = load_config(config).with_stage_args(list(stages)).with_slow_args(list(slow))
    cfg = cfg.with_generate_args(list(generate))
    if rate is not None:
        if not 1 <= rate <= 1000:
            raise UsageError(
                f"--rate {rate:g} is out of range",
                "use 1..1000 Hz (50, the default, costs the target ~2 %)",
            )
        cfg = replace(cfg, collect=replace(cfg.collect, rate_hz=rate))
    return cfg


def targets(pids: Sequence[int]) -> tuple[TargetInfo, list[int]]:
    """The session's target (the first pid) and the other target pids, each checked (a pid
    given twice counts once)."""
    # imported here: pid checks run py-spy (subprocess), which only the collecting commands need
    from infertop.collect.target import inspect_target

    unique = list(dict.fromkeys(pids))
    target = inspect_target(unique[0])
    for pid in unique[1:]:
        inspect_target(pid)  # the same clear error for any pid that cannot be followed
    return target, unique[1:]


def need_tty(what: str) -> None:
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        raise UsageError(
            f"{what} needs a terminal",
            "for a headless session use `infertop record PID -o FILE --duration S`",
        )
