"""Run a sample under one continuous torch.profiler session: the usual way people profile a
service (a ``torch.profiler.profile()`` around the serving loop), for comparison with the agent.

    python benchmarks/profiled_launch.py MODULE [ARGS...]

The profiler records CPU ops on every thread (``profile_all_threads``, as the agent does) from
start to exit; it is never stopped (the bench terminates the process), so what is measured is
the cost of recording alone, before any trace export.
"""

from __future__ import annotations

import os
import runpy
import sys

import torch


def main() -> None:
    module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
    sys.path[0] = os.getcwd()  # like ``python -m``: modules from the working directory
    config = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], experimental_config=config
    ):
        runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
