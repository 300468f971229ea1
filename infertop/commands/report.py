"""``infertop report FILE``: the summary of a recording or a torch.profiler trace."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from infertop.commands.base import Command
from infertop.commands.common import add_config_flags, load_cfg
from infertop.errors import EXIT_OK

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig


def add_arguments(p: argparse.ArgumentParser, _agent: AgentConfig | None) -> None:
    p.add_argument("file")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    add_config_flags(p)


def run(args: argparse.Namespace) -> int:
    # imports here and below: each kind of input loads only its own modules (numpy, the
    # analysis), and a trace is read while they import
    prefetch = None
    if args.file.endswith((".json", ".json.gz")) and os.path.isfile(args.file):
        from infertop.trace.files import Prefetch

        prefetch = Prefetch(args.file)  # read + gunzip on another core while modules import
    from infertop.trace.files import is_trace_path

    if is_trace_path(args.file):
        from infertop.report.trace import build_ranks_report, build_trace_report, render_trace_text

        data = prefetch.take() if prefetch is not None else None
        cfg = load_cfg(args.config, args.stage, slow=args.slow)
        ranks = build_ranks_report(args.file, cfg)  # None: not a directory of ranks
        rep = ranks if ranks is not None else build_trace_report(args.file, cfg.findings, data)
        if args.format == "json":
            sys.stdout.write(json.dumps(rep, indent=2) + "\n")
        else:
            sys.stdout.write(render_trace_text(rep, markdown=args.format == "markdown"))
        return EXIT_OK
    from infertop.record.reader import read_recording
    from infertop.report.recording import recording_report
    from infertop.report.text import render_markdown, render_text

    rec = read_recording(args.file)
    if rec.warning:
        print(f"infertop: warning: {rec.warning}", file=sys.stderr)
    cfg = load_cfg(args.config, args.stage, slow=args.slow)
    rep = recording_report(rec, cfg, path=args.file).report
    if args.format == "json":
        sys.stdout.write(json.dumps(rep, indent=2) + "\n")
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(rep))
    else:
        sys.stdout.write(render_text(rep))
    return EXIT_OK


COMMAND = Command("report", "summary of a recording", add_arguments, run)
