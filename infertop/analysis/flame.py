"""Flame trees of Python stacks, and the hottest frames."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from infertop.analysis.stages import IDLE
from infertop.model.events import Frame


class FlameNode:
    """A node of the call tree. Built once by ``build_flame``; treat as read-only afterwards."""

    __slots__ = ("frame", "total", "self_count", "stages", "children", "parent")

    def __init__(self, frame: Frame | None, parent: FlameNode | None = None) -> None:
        self.frame = frame
        self.total = 0
        self.self_count = 0
        self.stages: dict[str, int] = {}
        self.children: dict[Frame, FlameNode] = {}
        self.parent = parent

    @property
    def stage(self) -> str:
        """The stage most of this node's samples belong to."""
        return max(self.stages.items(), key=lambda kv: kv[1])[0] if self.stages else "other"

    def sorted_children(self) -> list[FlameNode]:
        return sorted(self.children.values(), key=lambda n: -n.total)

    def path(self) -> list[Frame]:
        out: list[Frame] = []
        node: FlameNode | None = self
        while node is not None and node.frame is not None:
            out.append(node.frame)
            node = node.parent
        return out[::-1]

    def find(self, path: list[Frame]) -> FlameNode | None:
        node: FlameNode = self
        for f in path:
            nxt = node.children.get(f)
            if nxt is None:
                return None
            node = nxt
        return node


def build_flame(
    stack_counts: Iterable[tuple[int, int]],
    frames_of: Callable[[int], Sequence[Frame]],
    stage_of: Callable[[int], str],
    stage_filter: str | None = None,
) -> FlameNode:
    """Aggregate (stack id, count) pairs into a call tree rooted at an unnamed node.

    Stacks of threads caught waiting (stage ``idle``) are left out unless asked for by filter.
    """
    root = FlameNode(None)
    for sid, n in stack_counts:
        stage = stage_of(sid)
        if stage != stage_filter and (stage_filter is not None or stage == IDLE):
            continue
        node = root
        node.total += n
        node.stages[stage] = node.stages.get(stage, 0) + n
        for f in frames_of(sid):
            child = node.children.get(f)
            if child is None:
                child = node.children[f] = FlameNode(f, node)
            child.total += n
            child.stages[stage] = child.stages.get(stage, 0) + n
            node = child
        node.self_count += n
    return root


@dataclass(frozen=True, slots=True)
class TopFrame:
    frame: Frame
    stage: str
    self_count: int
    total_count: int
    self_share: float
    total_share: float


def top_frames(
    stack_counts: Iterable[tuple[int, int]],
    frames_of: Callable[[int], Sequence[Frame]],
    stage_of: Callable[[int], str],
    limit: int = 20,
) -> list[TopFrame]:
    """Frames of active stacks ranked by self samples; total counts each frame once per stack."""
    self_c: dict[Frame, int] = {}
    total_c: dict[Frame, int] = {}
    stage_c: dict[Frame, dict[str, int]] = {}
    grand = 0
    for sid, n in stack_counts:
        frames = frames_of(sid)
        stage = stage_of(sid)
        if not frames or stage == IDLE:
            continue
        grand += n
        leaf = frames[-1]
        self_c[leaf] = self_c.get(leaf, 0) + n
        for f in set(frames):
            total_c[f] = total_c.get(f, 0) + n
            per = stage_c.setdefault(f, {})
            per[stage] = per.get(stage, 0) + n
    if grand == 0:
        return []
    ranked = sorted(self_c.items(), key=lambda kv: (-kv[1], kv[0].function))[:limit]
    return [
        TopFrame(
            f,
            max(stage_c[f].items(), key=lambda kv: kv[1])[0],
            n,
            total_c[f],
            n / grand,
            total_c[f] / grand,
        )
        for f, n in ranked
    ]
