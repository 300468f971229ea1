"""The shape of a flame: call plumbing folded into its caller, and line- or function-level frames.

A ``FlameShape`` says how stacks are drawn; a ``StackShaper`` gives the shaped frames of a
stack id, memoised (stack ids never change meaning in a session). Folding removes a frame from
the stack, so its time stays with its caller and its callees become the caller's: nothing is
lost, one level less is drawn. Function-level frames set every line to 0, so the same function
at different lines is one frame (py-spy's ``--nolineno``). Stages are classified on the stacks
as sampled, never on shaped ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infertop.agent.payload.patterns import split_pattern
from infertop.analysis.stages import StageRule
from infertop.config import DEFAULT_FOLD_FRAMES
from infertop.model.events import Frame


@dataclass(frozen=True)
class FlameShape:
    fold: bool = True  # fold the plumbing frames ``patterns`` match
    lines: bool = True  # False: function-level frames (line 0)
    patterns: tuple[str, ...] = DEFAULT_FOLD_FRAMES

    @property
    def identity(self) -> bool:
        """Stacks come out as sampled."""
        return self.lines and not (self.fold and self.patterns)


class FoldRule:
    """``FILE_GLOB:FUNC_GLOB`` (or ``FUNC_GLOB``), matched as a stage rule is. A dotted
    FUNC_GLOB also matches a bare function name by its last part: Python < 3.11 has no
    qualified names."""

    __slots__ = ("pattern", "_rule", "_bare")

    def __init__(self, pattern: str) -> None:
        file_glob, func_glob = split_pattern(pattern)
        self.pattern = pattern
        self._rule = StageRule.parse("fold", pattern)
        last = func_glob.rpartition(".")[2]
        bare = f"{file_glob}:{last}" if file_glob else last
        self._bare = StageRule.parse("fold", bare) if last != func_glob else None

    def matches(self, frame: Frame) -> bool:
        if self._rule.matches(frame):
            return True
        return self._bare is not None and "." not in frame.function and self._bare.matches(frame)


class StackShaper:
    """``frames_of`` seen through a ``FlameShape``, memoised per stack id and per frame."""

    def __init__(self, shape: FlameShape, frames_of: Callable[[int], Sequence[Frame]]) -> None:
        self.shape = shape
        self._frames_of = frames_of
        self._rules = [FoldRule(p) for p in shape.patterns] if shape.fold else []
        self._frame: dict[Frame, Frame | None] = {}  # None: folded
        self._stack: dict[int, list[Frame]] = {}

    def shaped(self, frame: Frame) -> Frame | None:
        """``frame`` as drawn, or None when it is folded into its caller."""
        try:
            return self._frame[frame]
        except KeyError:
            pass
        out: Frame | None = frame
        if any(r.matches(frame) for r in self._rules):
            out = None
        elif not self.shape.lines and frame.line:
            out = Frame(frame.function, frame.file, 0)
        self._frame[frame] = out
        return out

    def __call__(self, stack_id: int) -> list[Frame]:
        frames = self._stack.get(stack_id)
        if frames is None:
            raw = self._frames_of(stack_id)
            frames = [f for f in map(self.shaped, raw) if f is not None]
            if not frames and raw:  # all plumbing: keep the innermost, time must go somewhere
                frames = [raw[-1]]
            self._stack[stack_id] = frames
        return frames


class ShaperCache:
    """One ``StackShaper`` per (session, shape), for a caller that builds many snapshots."""

    def __init__(self) -> None:
        self._key: tuple[int, FlameShape] | None = None
        self._shaper: StackShaper | None = None

    def get(
        self, session_id: int, shape: FlameShape, frames_of: Callable[[int], Sequence[Frame]]
    ) -> Callable[[int], Sequence[Frame]]:
        if shape.identity:
            return frames_of
        if self._shaper is None or self._key != (session_id, shape):
            self._key, self._shaper = (session_id, shape), StackShaper(shape, frames_of)
        return self._shaper
