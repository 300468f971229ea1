"""``infertop diff BASE NEW``: two recordings or traces compared; a CI gate with --fail-above."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.commands.common import add_config_flags, load_cfg
from infertop.errors import EXIT_OK, EXIT_REGRESSION, UsageError

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig

DESCRIPTION = (
    "Per-call latency (stage calls, ProfilerStep#N and other annotations) p50/p95, "
    "stage shares, GPU time per step, the ops, kernels and frames that moved most, findings "
    "new and gone. With --fail-above PCT: exit 1 when a latency, a stage share or GPU time "
    "per step grew more than PCT % (a CI gate, see docs/export.md)."
)


def add_arguments(p: argparse.ArgumentParser, _agent: AgentConfig | None) -> None:
    p.add_argument("base", help="the reference: a recording or a torch.profiler trace")
    p.add_argument("new", help="the candidate, of either kind")
    p.add_argument(
        "--fail-above", type=float, metavar="PCT",
        help="exit 1 when a gated number grew more than PCT %% (without it: report only, exit 0)",
    )  # fmt: skip
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--flame", action="store_true",
        help="print the differential flame instead: the new recording's call tree, each frame's "
        "share beside its share in the base (red grew, blue shrank); recordings only",
    )  # fmt: skip
    add_config_flags(p)


def run(args: argparse.Namespace) -> int:
    # imported here: the comparison (numpy, the readers) loads only when it runs
    from infertop.compare.diff import as_json, compare
    from infertop.compare.profile import load_profile
    from infertop.compare.render import render_text

    if args.fail_above is not None and not args.fail_above >= 0:
        raise UsageError(f"--fail-above {args.fail_above:g} must be a percentage >= 0")
    cfg = load_cfg(args.config, args.stage, slow=args.slow)
    base, new = load_profile(args.base, cfg), load_profile(args.new, cfg)
    res = compare(base, new, args.fail_above)
    if args.flame:
        _print_flame(args, base.flame, new.flame)
    elif args.format == "json":
        sys.stdout.write(json.dumps(as_json(res), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(res))
    return EXIT_REGRESSION if res.regressions else EXIT_OK


def _print_flame(args: argparse.Namespace, base: object, new: object) -> None:
    import os

    from infertop.analysis.flame import FlameNode
    from infertop.compare.flame_render import flame_diff_json, render_flame_diff

    for path, flame in ((args.base, base), (args.new, new)):
        if not isinstance(flame, FlameNode):
            raise UsageError(
                f"{path} is a torch.profiler trace: it has no Python samples for a flame",
                "diff --flame compares two infertop recordings (record, attach --record)",
            )
    assert isinstance(base, FlameNode) and isinstance(new, FlameNode)
    if args.format == "json":
        sys.stdout.write(json.dumps(flame_diff_json(new, base), indent=2) + "\n")
        return
    colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    sys.stdout.write(render_flame_diff(new, base, args.base, args.new, colour=colour))


COMMAND = Command(
    "diff",
    "compare two recordings or traces; exit 1 on a regression above --fail-above",
    add_arguments,
    run,
    description=DESCRIPTION,
)
