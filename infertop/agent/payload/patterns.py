"""The stage-pattern language, once for both sides: ``FUNC_GLOB`` or ``FILE_GLOB:FUNC_GLOB``.

The agent matches ``stage_functions`` and ``generate_functions`` against the functions alive in
the target with it; infertop's stage rules (``analysis/stages.py``) match py-spy's frames and the
agent's call samples with it. The file glob is matched against the full path (``\\`` read as
``/``), the function glob against the qualified name or, failing that, its last part (``encode``
matches ``Tokenizer.encode``); shell globs, case-sensitive. The last ``:`` splits the two, and an
empty function part (``*server.py:``) is any function of the file.
"""

from __future__ import annotations

import fnmatch
import re


def split_pattern(pattern):
    """(file glob or None, function glob) of ``pattern``."""
    file_glob, sep, func_glob = pattern.rpartition(":")
    if not sep:
        return None, pattern
    return file_glob or None, func_glob or "*"


class StagePattern:
    """One compiled pattern and the stage it names."""

    __slots__ = ("stage", "pattern", "_file", "_func")

    def __init__(self, stage, pattern):
        self.stage = stage
        self.pattern = pattern
        file_glob, func_glob = split_pattern(pattern)
        self._file = None if file_glob is None else re.compile(fnmatch.translate(file_glob)).match
        self._func = re.compile(fnmatch.translate(func_glob)).match

    def matches(self, filename, qualname):
        """Whether a function of file ``filename`` called ``qualname`` is named by the pattern."""
        if self._file is not None and self._file(filename.replace("\\", "/")) is None:
            return False
        if self._func(qualname) is not None:
            return True
        short = qualname.rpartition(".")[2]
        return short != qualname and self._func(short) is not None

    def __eq__(self, other):
        return type(other) is StagePattern and (other.stage, other.pattern) == (self.stage, self.pattern)

    def __hash__(self):
        return hash((self.stage, self.pattern))

    def __repr__(self):
        return "StagePattern(%r, %r)" % (self.stage, self.pattern)
