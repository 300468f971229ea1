"""Focused tests of two invariant-keepers reached only through entry points otherwise:
``export/lanes.py`` (slices on one lane always nest) and ``record/references.py`` (ids are
defined before they are used)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infertop.export.lanes import EndOrderedLanes, StartOrderedLanes
from infertop.model.events import Frame, FrameDef, SampleWindow, StackDef
from infertop.record.references import References

intervals = st.lists(
    st.tuples(st.integers(0, 1000), st.integers(1, 300)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=60,
)


def _nested(placed: list[tuple[int, int]]) -> bool:
    """No two intervals on one lane overlap without one containing the other."""
    for i, (a0, a1) in enumerate(placed):
        for b0, b1 in placed[i + 1 :]:
            overlap = a0 < b1 and b0 < a1
            contains = (a0 <= b0 and b1 <= a1) or (b0 <= a0 and a1 <= b1)
            if overlap and not contains:
                return False
    return True


@settings(max_examples=200, deadline=None)
@given(intervals, st.integers(1, 4))
def test_start_ordered_lanes_nest_and_drop_only_when_full(raw, max_lanes: int) -> None:
    lanes = StartOrderedLanes(max_lanes)
    by_lane: dict[int, list[tuple[int, int]]] = {}
    for s, e in sorted(raw, key=lambda iv: (iv[0], -iv[1])):
        lane = lanes.place(s, e)
        if lane is not None:
            by_lane.setdefault(lane, []).append((s, e))
    assert all(_nested(v) for v in by_lane.values())
    assert len(by_lane) <= max_lanes
    assert sum(map(len, by_lane.values())) + lanes.dropped == len(raw)
    if lanes.dropped:
        assert len(by_lane) == max_lanes  # a drop only when every lane was in use


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_end_ordered_lanes_nest(raw) -> None:
    lanes = EndOrderedLanes(8)
    by_lane: dict[int, list[tuple[int, int]]] = {}
    for s, e in sorted(raw, key=lambda iv: (iv[1], -iv[0])):  # as calls return
        lane = lanes.place(s, e)
        if lane is not None:
            by_lane.setdefault(lane, []).append((s, e))
    assert all(_nested(v) for v in by_lane.values())
    assert sum(map(len, by_lane.values())) + lanes.dropped == len(raw)


def test_end_ordered_lanes_put_calls_and_their_callers_on_one_lane() -> None:
    lanes = EndOrderedLanes()
    # inner calls return first, then the outer one that encloses them, then a sibling
    assert [lanes.place(*iv) for iv in ((10, 20), (30, 40), (5, 50), (60, 70))] == [0, 0, 0, 0]
    assert lanes.place(45, 65) == 1  # overlaps (5, 50) and (60, 70) partly: the next lane


F = Frame("f", "/a.py", 1)


def test_references_accept_ids_defined_before_use() -> None:
    refs = References()
    refs.check([FrameDef(0, F), FrameDef(1, F), StackDef(0, (0, 1)), SampleWindow(0, 1, 50, 50, ((7, 0, 3),))])
    refs.check([FrameDef(1, F)])  # a definition given again is harmless


@pytest.mark.parametrize(
    "events,message",
    [
        ([FrameDef(1, F)], "frame 1 defined out of order"),
        ([FrameDef(0, F), StackDef(0, (0, 1))], "stack 0 names an undefined frame"),
        ([FrameDef(0, F), StackDef(1, (0,))], "stack 1 defined out of order"),
        ([SampleWindow(0, 1, 50, 50, ((7, 0, 3),))], "a sample names undefined stack 0"),
        ([FrameDef(-1, F)], "frame -1 defined out of order"),
    ],
)
def test_references_refuse_an_id_used_before_it_is_defined(events, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        References().check(events)
