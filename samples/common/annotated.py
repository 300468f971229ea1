"""``--annotate``: a sample's stage clock whose spans are also ``infertop.stage`` spans.

The samples time their stages with ``StageClock`` (the ground truth). With ``--annotate`` every
such span is also an ``infertop.stage(NAME)`` block, which an attached infertop agent collects
as timed stage calls on any Python (without annotations only Python >= 3.12 times stage
functions): what a service annotated by hand looks like to infertop. Like ``truth.py``, its
frames stay trivial and their names avoid every word the stage rules look for.
"""

from __future__ import annotations

from typing import Any


class _Pair:
    """Two context managers entered together, left in reverse order."""

    __slots__ = ("_outer", "_inner")

    def __init__(self, outer: Any, inner: Any) -> None:
        self._outer, self._inner = outer, inner

    def __enter__(self) -> None:
        self._outer.__enter__()
        self._inner.__enter__()

    def __exit__(self, *exc: object) -> None:
        try:
            self._inner.__exit__(*exc)
        finally:
            self._outer.__exit__(*exc)


class AnnotatedClock:
    """A ``StageClock`` (everything else passes through) whose ``stage(NAME)`` is also
    ``infertop.stage(NAME)``."""

    def __init__(self, clock: Any) -> None:
        import infertop  # only with --annotate: a plain run of a sample never imports infertop

        self._clock = clock
        self._mark = infertop.stage

    def stage(self, name: str) -> _Pair:
        return _Pair(self._clock.stage(name), self._mark(name))

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._clock, attr)


def annotated(clock: Any, on: bool) -> Any:
    """``clock`` itself, or with ``on`` its annotated twin."""
    return AnnotatedClock(clock) if on else clock
