"""The stage model: which pipeline stage a Python stack belongs to.

Order of precedence: an explicit annotation frame (``infertop:NAME``, from ``@infertop.stage``)
anywhere on the stack, innermost first; then the user's rules, innermost matching frame first;
then a generation call's parts (``config.GENERATION_RULES``: ``prefill``, ``decode``); then,
for a thread caught in a blocking wait (``config.WAIT_FRAMES``), what the stack says it waits
for (``config.WAIT_STAGE_RULES``: vLLM's engine core waiting for its worker), else ``queue`` if
a queue rule matches the stack and ``idle`` if not; then the default rules, innermost matching frame first;
else ``other``. Users' rules win over the defaults so that
``--stage preprocess='*server.py:encode_batch'`` claims the whole call, torch calls inside it
included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from infertop.agent.payload.patterns import StagePattern
from infertop.annotate import STAGE_FRAME_PREFIX
from infertop.config import DEFAULT_STAGE_RULES, GENERATION_RULES, WAIT_FRAMES, WAIT_STAGE_RULES
from infertop.model.events import Frame

OTHER = "other"
IDLE = "idle"
QUEUE = "queue"


@dataclass(frozen=True)
class StageRule:
    """A stage and its pattern, matched as the agent matches its ``stage_functions``: one
    pattern language (``agent/payload/patterns.py``) for py-spy's frames and the agent's
    functions."""

    stage: str
    pattern: str
    _compiled: StagePattern = field(compare=False, repr=False)

    @classmethod
    def parse(cls, stage: str, pattern: str) -> StageRule:
        return cls(stage, pattern, StagePattern(stage, pattern))

    def matches(self, frame: Frame) -> bool:
        return bool(self._compiled.matches(frame.file, frame.function))


_WAIT_RULES = [StageRule.parse(IDLE, p) for p in WAIT_FRAMES]


def caught_waiting(frames: Sequence[Frame]) -> bool:
    """The stack's innermost frame is a blocking wait (``config.WAIT_FRAMES``): the thread
    waits, whatever stage its stack is in; sampled as active, it was woken or waiting for a CPU
    or the GIL, not working."""
    return bool(frames) and any(r.matches(frames[-1]) for r in _WAIT_RULES)


class StageClassifier:
    """Classifies stacks (root-first frame lists); memoises by stack id."""

    def __init__(self, user_rules: Sequence[tuple[str, str]] = ()) -> None:
        self.user_rules = [StageRule.parse(s, p) for s, p in user_rules]
        self.generation_rules = [StageRule.parse(s, p) for s, p in GENERATION_RULES]
        self.default_rules = [StageRule.parse(s, p) for s, p in DEFAULT_STAGE_RULES]
        self.queue_rules = [r for r in self.default_rules if r.stage == QUEUE]
        self.wait_rules = [StageRule.parse(s, p) for s, p in WAIT_STAGE_RULES]
        self._cache: dict[int, tuple[str, int]] = {}

    def classify(self, frames: Sequence[Frame]) -> tuple[str, int]:
        """Return (stage, index of the deciding frame or -1)."""
        for i in range(len(frames) - 1, -1, -1):
            func = frames[i].function
            if func.startswith(STAGE_FRAME_PREFIX):
                return func[len(STAGE_FRAME_PREFIX) :] or OTHER, i
        hit = self._innermost(frames, self.user_rules) or self._innermost(frames, self.generation_rules)
        if hit is not None:
            return hit
        if caught_waiting(frames):
            return (
                self._innermost(frames, self.wait_rules)
                or self._innermost(frames, self.queue_rules)
                or (IDLE, len(frames) - 1)
            )
        return self._innermost(frames, self.default_rules) or (OTHER, -1)

    @staticmethod
    def _innermost(frames: Sequence[Frame], rules: list[StageRule]) -> tuple[str, int] | None:
        for i in range(len(frames) - 1, -1, -1):
            frame = frames[i]
            for rule in rules:
                if rule.matches(frame):
                    return rule.stage, i
        return None

    def stage_of(self, stack_id: int, frames: Sequence[Frame]) -> str:
        hit = self._cache.get(stack_id)
        if hit is None:
            hit = self.classify(frames)
            self._cache[stack_id] = hit
        return hit[0]
