"""The command protocol: what a subcommand module declares for ``cli.main`` to find it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from infertop.collect.agent.client import AgentConfig


class Command(NamedTuple):
    """One subcommand; each command module declares one as ``COMMAND`` (``commands/__init__``
    registers them).

    ``add_arguments(parser, agent)`` fills the command's subparser. ``agent`` is the agent's
    ``AgentConfig``, for the defaults the help names; it is given only to ``collecting``
    commands and only when their help may be shown, else None. ``run(args)`` does the work and
    returns the exit code; a failure is raised as an ``InfertopError``, which ``cli.main`` turns
    into one message and that error's exit code.

    (A NamedTuple, not a dataclass: every command's declaration is read at start-up, and
    ``dataclasses`` costs start-up.)
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser, AgentConfig | None], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None
    epilog: str | None = None
    #: description and epilog printed with their line breaks as written
    raw_text: bool = False
    #: the command collects from a live target (its parser names the agent's defaults)
    collecting: bool = False
