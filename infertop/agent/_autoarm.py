"""Imported at interpreter start-up by ``infertop-agent.pth`` when ``INFERTOP_AGENT`` is set.

Arms the agent (``infertop.agent.arm``) and does nothing else: no torch import (profiler windows
start once the program imports torch itself), no output, no exception ever escapes.
"""

from __future__ import annotations


def _main() -> None:
    try:
        from infertop.agent import arm_from_env

        arm_from_env()
    except Exception:
        pass


_main()
