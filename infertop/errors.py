"""Errors that reach the user: each carries its exit code and a hint on what to do next."""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_NO_TARGET = 3
EXIT_UNSUPPORTED = 4
EXIT_BAD_INPUT = 5


class InfertopError(Exception):
    """Base of every error the CLI turns into one message and an exit code."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(InfertopError):
    exit_code = EXIT_USAGE


class TargetNotFound(InfertopError):
    """No such process, or it cannot be inspected (permissions)."""

    exit_code = EXIT_NO_TARGET


class TargetUnsupported(InfertopError):
    """The process exists but is not a Python we can sample."""

    exit_code = EXIT_UNSUPPORTED


class BadInputFile(InfertopError):
    """A recording or trace that cannot be read."""

    exit_code = EXIT_BAD_INPUT
