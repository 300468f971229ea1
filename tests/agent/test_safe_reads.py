"""What the agent reads of other threads' state, read so that it cannot break them
(agent/payload/safe_reads.py): the stacks it walks and the collector's objects it looks
through, in this process, against real threads that build tuples and run generators while
the agent reads."""

from __future__ import annotations

import gc
import sys
import threading
import time
import types

import pytest

from infertop.agent.payload.callsamples import stack_of
from infertop.agent.payload.memory import object_census
from infertop.agent.payload.safe_reads import (
    CollectorOff,
    classes_compare_in_c,
    code_lines,
    frames_down,
    subclasses_of,
    tracked_of_types,
    type_counts,
)
from infertop.agent.payload.stages import find_stage_codes, parse_stage_patterns


def _python_walk(frame, depth):
    out = []
    while frame is not None and len(out) < depth:
        out.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return tuple(out)


def test_a_stack_read_in_one_call_is_the_stack_a_python_walk_reads() -> None:
    here = sys._getframe()
    assert code_lines(here, 500) == _python_walk(here, 500)
    assert code_lines(here, 2) == _python_walk(here, 2)
    assert [f.f_code for f in frames_down(here, 3)] == [c for c, _ in _python_walk(here, 3)]
    assert stack_of(here)[-1][0] is here.f_code  # root first, as the sampler sends it


def test_the_collector_is_off_inside_and_as_it_was_after() -> None:
    assert gc.isenabled()
    with CollectorOff():
        assert not gc.isenabled()
        with CollectorOff():  # a read inside another leaves it off for the outer one
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with CollectorOff():
            pass
        assert not gc.isenabled()  # a program that turned it off finds it off
    finally:
        gc.enable()


class _Base:
    pass


class _Derived(_Base):
    pass


class _Proxy:
    """An object whose ``__class__`` lies (a proxy's): the reads must go by its real type."""

    @property  # type: ignore[misc]
    def __class__(self):  # noqa: D105
        raise AssertionError("the reader asked an object for its __class__")


def test_objects_are_found_by_their_exact_types_and_nothing_else_is_held() -> None:
    held = [_Base(), _Derived(), _Proxy()]
    found = tracked_of_types(subclasses_of(_Base))
    assert sorted(type(o).__name__ for o in found) == ["_Base", "_Derived"]
    assert all(type(o) in (_Base, _Derived) for o in found)
    functions = tracked_of_types((types.FunctionType,))
    assert test_objects_are_found_by_their_exact_types_and_nothing_else_is_held in functions
    # the collector's list of every object is gone once the read returns: no list as long as
    # the heap, and none of the lazy views that fed it
    longest = max(len(x) for x in tracked_of_types((list,)))
    assert longest < len(gc.get_objects()) // 2
    assert not [o for o in gc.get_objects() if type(o).__name__ in ("_tee", "_tee_dataobject")]
    del held


def test_the_type_counts_are_those_of_the_heap() -> None:
    many = [_Derived() for _ in range(5000)]
    counts = type_counts()
    assert [n for cls, n in counts if cls is _Derived] == [5000]
    assert sum(n for _, n in counts) >= 5000
    del many


def _build_tuples(stop: threading.Event, errors: list) -> None:
    """``tuple()`` of a generator that hands the GIL over while the tuple is half built:
    the tuple is resized as it grows, which CPython refuses where another reference to it
    exists ("bad argument to internal function")."""

    def items():
        for i in range(300):
            if i % 20 == 0:
                time.sleep(0)
            yield i

    while not stop.is_set():
        try:
            tuple(items())
        except SystemError as e:  # pragma: no cover - the failure this test is for
            errors.append(e)
            return


def test_the_census_never_breaks_a_tuple_another_thread_is_building() -> None:
    """The object census used to hold ``gc.get_objects()`` (the half-built tuple in it) while
    it gave the GIL up: the builder's resize raised SystemError in the target's own code (at
    this switch interval, in the first census, every run)."""
    stop, errors = threading.Event(), []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the threads take turns between almost any two bytecodes
    builders = [threading.Thread(target=_build_tuples, args=(stop, errors)) for _ in range(2)]
    for t in builders:
        t.start()
    try:
        deadline = time.monotonic() + 3.0
        censuses = 0
        while time.monotonic() < deadline and not errors:
            object_census()
            find_stage_codes(parse_stage_patterns([["forward", "*:nothing_is_called_this"]]))
            censuses += 1
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        for t in builders:
            t.join(timeout=10)
    assert censuses > 0
    assert errors == []


@pytest.mark.parametrize("depth", [1, 40])
def test_stacks_of_threads_that_run_generators_are_read_whole(depth: int) -> None:
    """Another thread's stack read while it runs: every sample holds that thread's code
    only, however often its frames come and go; whole stacks reach its root (a stack read
    just after its generator yielded ends at the generator: its frame has no caller then)."""
    stop = threading.Event()

    def inner(n):
        if n:
            return inner(n - 1)
        return sum(x for x in range(50))

    def run():
        while not stop.is_set():
            inner(depth)

    t = threading.Thread(target=run)
    t.start()
    try:
        seen, whole = 0, 0
        allowed = {"run", "inner", "<genexpr>", "is_set", "_bootstrap", "_bootstrap_inner"}
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            with CollectorOff():
                frames = sys._current_frames()
                try:
                    lines = code_lines(frames[t.ident], 200) if t.ident in frames else ()
                finally:
                    frames = None
            if lines:
                seen += 1
                names = [c.co_name for c, _ in lines]
                assert set(names) <= allowed
                whole += names[-1] == "_bootstrap"
    finally:
        stop.set()
        t.join(timeout=10)
    assert seen > 0 and whole > 0


def test_a_metaclass_that_hashes_in_python_is_never_called() -> None:
    """Where a metaclass defines ``__hash__``/``__eq__`` in Python, classes are read by id:
    the reads run none of the target's code (which could hand the GIL over mid-read)."""
    calls = []

    class Meta(type):
        def __hash__(cls):
            calls.append("hash")
            return 1

        def __eq__(cls, other):
            calls.append("eq")
            return cls is other

    Odd = Meta("Odd", (), {})
    odd = [Odd() for _ in range(3)]
    assert not classes_compare_in_c()
    calls.clear()
    assert sorted(map(id, tracked_of_types((Odd, _Base)))) == sorted(map(id, odd))
    assert [n for cls, n in type_counts() if cls is Odd] == [3]
    assert calls == []
    del odd
