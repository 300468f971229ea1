"""What the agent's thread reads of the state other threads own: their stacks, and the objects
the garbage collector tracks, read so that the reading cannot break them.

Two ways a profiler thread breaks its target on CPython, both seen here:

- **Another thread's frames.** A frame object made for another thread's frame
  (``sys._current_frames()``, each ``f_back``) is linked into that thread's stack. Making one
  allocates, an allocation can start a collection, and a collection runs Python code (finalizers,
  ``gc.callbacks``); so can the walk's own bytecode between two frames: either can hand the GIL
  to the thread being read while the agent is halfway down its stack. On CPython 3.11.7 the
  call sampler's walk (``stack_of`` with ``f_back`` in a Python loop) killed a
  text-generation service with SIGSEGV in ``PyFrame_GetBack`` (a frame whose ``previous``
  pointed at freed memory) in 2 of 6 recordings at 1,000 samples a second, and in 2 of 12 at
  the default 100 (docs/performance.md).
- **The collector's list.** ``gc.get_objects()`` holds every tracked object, also those still
  being built: a tuple that ``tuple(generator)`` is filling while the generator runs. Held
  past a point where that thread runs (a ``time.sleep(0)``, any bytecode), the tuple's
  reference count is 2 when its builder resizes it: "SystemError: Objects/tupleobject.c:927:
  bad argument to internal function" in the target's own code (seen in ``torch._dynamo``'s
  import while the object census ran).

So here every such read runs with the collector off (``CollectorOff``), and the parts that hold
another thread's frames or the whole heap run in one C call each: ``itertools`` and
``operator`` chains, no bytecode between their steps, so no other thread runs while they hold
them. What they give back holds no frame, and only the objects asked for.
"""

from __future__ import annotations

import functools
import gc
import itertools
import operator
from _collections import _count_elements

_FRAME_CODE_LINE = operator.attrgetter("f_code", "f_lineno")
_FRAME_CODE = operator.attrgetter("f_code")
_IS_SOMETHING = functools.partial(operator.is_not, None)
_ALL_GENERATIONS = (None,)


class CollectorOff:
    """``with CollectorOff():`` no garbage collection inside (the collector turned off if it was
    on, and on again after): nothing the collector would run (finalizers, ``gc.callbacks``) can
    run in the middle of a read and let another thread take the GIL."""

    __slots__ = ("was_on",)

    def __enter__(self):
        self.was_on = gc.isenabled()
        if self.was_on:
            gc.disable()
        return self

    def __exit__(self, *exc):
        if self.was_on:
            gc.enable()
        return False


def _frames_down(frame, depth):
    """A lazy chain of ``frame`` and its callers, at most ``depth``, ending before None: each
    ``f_back`` read by ``getattr`` inside ``itertools.accumulate`` (C, no bytecode)."""
    steps = itertools.chain((frame,), itertools.repeat("f_back", max(0, depth - 1)))
    return itertools.takewhile(_IS_SOMETHING, itertools.accumulate(steps, getattr))


def code_lines(frame, depth):
    """((code, line or None), ...) of ``frame`` and its callers, innermost first, at most
    ``depth``: read in one C call, the frames let go before it returns."""
    return tuple(map(_FRAME_CODE_LINE, _frames_down(frame, depth)))


def codes_down(frame, depth):
    """The code objects of ``frame`` and its callers, innermost first, at most ``depth`` (one C
    call, as ``code_lines``)."""
    return tuple(map(_FRAME_CODE, _frames_down(frame, depth)))


def frames_down(frame, depth):
    """[frame, its caller, ...], at most ``depth``, made in one C call: for a reader that must
    look into a frame (its locals), which it then does with the collector off."""
    return list(_frames_down(frame, depth))


#: partials for the chains below: map(type, objs), map(id, types)
_TYPES_OF = functools.partial(map, type)
_IDS_OF = functools.partial(map, id)


def classes_compare_in_c():
    """Whether no metaclass defines its own ``__hash__`` or ``__eq__``: then a class is a key
    (of a dict, a set) without any Python code running. Else classes are keyed by their ids
    (twice the cost: an int made per object)."""
    own_dict = type.__dict__["__dict__"].__get__
    for meta in subclasses_of(type):
        if meta is not type:
            space = own_dict(meta)
            if "__hash__" in space or "__eq__" in space:
                return False
    return True


def _type_keys(keys, by_class):
    """map(type, ...) over ``keys`` (lazy lists), or map(id, map(type, ...))."""
    types_of = map(_TYPES_OF, keys)
    return types_of if by_class else map(_IDS_OF, types_of)


def _heap_views(wanted, by_class):
    """Lazy views of one ``gc.get_objects()`` that nothing has called yet: its objects whose
    type is in ``wanted`` (classes where ``by_class``, else their ids), then the list's
    clearing. The list holds these views themselves (they were made before it), so only
    cleared does it let them, and its objects, go at once."""
    heap, keys, clear = itertools.tee(map(gc.get_objects, _ALL_GENERATIONS), 3)
    picks = map(functools.partial(map, wanted.__contains__), _type_keys(keys, by_class))
    return map(list, map(itertools.compress, heap, picks)), map(list.clear, clear)


def tracked_of_types(types):
    """The objects the collector tracks whose type is exactly one of ``types`` (classes; an
    instance's ``__class__`` is never read: a proxy may compute it). The collector's list of
    every object is made, filtered, cleared and let go inside one C call (``next`` of a
    ``zip`` of the views: a temporary, freed with its arguments before the next bytecode),
    with the collector off: no object still being built is held once it returns, unless it
    is of a type asked for (functions, modules, containers; never the tuples C code
    resizes)."""
    by_class = classes_compare_in_c()
    wanted = frozenset(types) if by_class else frozenset(map(id, types))
    with CollectorOff():
        return next(zip(*_heap_views(wanted, by_class)))[0]


def type_counts():
    """[(class, how many objects of it the collector tracks), ...], counted inside one C call
    with the collector off (``collections``' counting helper; by id where a metaclass compares
    in Python, the ids then matched to the classes alive: no class is hashed then)."""
    by_class = classes_compare_in_c()
    counts = {}
    count = functools.partial(_count_elements, counts)
    with CollectorOff():
        next(map(count, _type_keys(map(gc.get_objects, _ALL_GENERATIONS), by_class)))
    if by_class:
        return list(counts.items())
    classes = classes_by_id(counts)
    return [(classes[i], n) for i, n in counts.items() if i in classes]


def subclasses_of(*roots):
    """Each class in ``roots`` and all its subclasses (``type.__subclasses__``, not a class's
    own override): the exact types ``tracked_of_types`` asks for to find a base's
    instances."""
    out, seen, todo = [], set(), list(roots)
    while todo:
        cls = todo.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        out.append(cls)
        try:
            todo.extend(type.__subclasses__(cls))
        except TypeError:
            continue
    return out


def classes_by_id(ids):
    """{id: class} of the classes alive whose ids are in ``ids``: found from ``object`` down its
    subclasses (only what the census's counts name)."""
    want, found = set(ids), {}
    for cls in subclasses_of(object):
        if id(cls) in want:
            found[id(cls)] = cls
            if len(found) == len(want):
                break
    return found
