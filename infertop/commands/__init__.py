"""The subcommands, one module each (see ``base.Command``), in the order ``--help`` lists them.

A command module imports at its top only what building its parser needs; its ``run`` imports
the rest (the readers, numpy, the collectors, Textual), so that one command's start-up never
pays for another's modules.
"""

from __future__ import annotations

from infertop.commands import (
    attach,
    demo,
    diff,
    export,
    import_,
    memory_snapshot,
    merge,
    record,
    replay,
    report,
    run,
    watch,
)
from infertop.commands.base import Command

COMMANDS: tuple[Command, ...] = (
    attach.COMMAND,
    run.COMMAND,
    record.COMMAND,
    watch.COMMAND,
    memory_snapshot.COMMAND,
    replay.COMMAND,
    report.COMMAND,
    import_.COMMAND,
    export.COMMAND,
    diff.COMMAND,
    merge.COMMAND,
    demo.COMMAND,
)

BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}

__all__ = ["BY_NAME", "COMMANDS", "Command"]
