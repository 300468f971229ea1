"""The agent's CUDA caching-allocator statistics, giving a window's memory back, and the object
census: what grows in the target's heap (docs/agent-protocol.md, ``census``)."""

from __future__ import annotations

import collections
import gc
import itertools
import sys
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.constants import (
    CENSUS_BUDGET,
    CENSUS_CONTAINERS,
    CENSUS_EVERY_S,
    CENSUS_FIRST_S,
    CENSUS_ITEMS_SIZED,
    CENSUS_LIST_ITEMS_READ,
    CENSUS_MAX_BLOCKS,
    CENSUS_MAX_HOLD_S,
    CENSUS_MIN_LEN,
    CENSUS_NAME_ENTRIES,
    CENSUS_TYPES,
)
from infertop.agent.payload.safe_reads import (
    subclasses_of,
    tracked_of_types,
    type_counts,
)
from infertop.agent.payload.window import _cuda_in_use, _torch

# -- end --


class _MemoryMixin:
    """The ``allocator`` messages, one per device each ALLOCATOR_EVERY_S while started (sent
    through ``_ServingMixin._send``)."""

    def _init_memory(self):
        self.next_allocator = 0.0

    def _send_allocator(self):
        torch = _torch()
        if torch is None or not _cuda_in_use(torch):
            return
        try:
            count = torch.cuda.device_count()
            current = torch.cuda.current_device()
        except Exception:
            return
        for device in range(count):
            try:
                stats = torch.cuda.memory_stats(device)
            except Exception:
                continue
            if not stats or (device != current and not stats.get("reserved_bytes.all.current")):
                continue
            self._send(
                {
                    "type": "allocator",
                    "t": time.time(),
                    "device": device,
                    "allocated": int(stats.get("allocated_bytes.all.current", 0)),
                    "reserved": int(stats.get("reserved_bytes.all.current", 0)),
                    "peak_allocated": int(stats.get("allocated_bytes.all.peak", 0)),
                    "alloc_retries": int(stats.get("num_alloc_retries", 0)),
                    "ooms": int(stats.get("num_ooms", 0)),
                }
            )


_malloc_trim: list = []  # [libc's malloc_trim or None], once looked up


def _trim_heap():
    """Give the memory a window's results took back to the system (glibc ``malloc_trim``):
    otherwise the target keeps the high-water mark of the biggest window in its RSS."""
    try:
        if not _malloc_trim:
            import ctypes

            libc = ctypes.CDLL(None)
            fn = getattr(libc, "malloc_trim", None)
            if fn is not None:
                fn.argtypes = [ctypes.c_size_t]
                fn.restype = ctypes.c_int
            _malloc_trim.append(fn)
        fn = _malloc_trim[0]
        if fn is not None:
            fn(0)
    except Exception:
        _malloc_trim[:] = [None]


def _container_bytes(obj, n):
    """A container's bytes and its items', estimated from CENSUS_ITEMS_SIZED items spread
    over it (for a dict: its values and keys)."""
    getsizeof = sys.getsizeof
    base = _container_kind(type(obj))  # read through the builtin's own methods, not a subclass's
    step = max(1, n // CENSUS_ITEMS_SIZED)
    try:
        own = getsizeof(obj)
        if base is dict:
            items = list(itertools.islice(dict.items(obj), 0, n, step))
            sized = [getsizeof(k) + getsizeof(v) for k, v in items]
        elif base is list:
            # through the collector's traversal, which skips the empty slots of a list still
            # being filled by C code (indexing one crashes): only where that copy is small
            items = gc.get_referents(obj) if n <= CENSUS_LIST_ITEMS_READ else []
            sized = [getsizeof(x) for x in itertools.islice(items, 0, None, step)]
            sized = sized[:CENSUS_ITEMS_SIZED]
        elif base is collections.deque:
            sized = [getsizeof(base.__getitem__(obj, i)) for i in range(0, n, step)][:CENSUS_ITEMS_SIZED]
        else:
            sized = [getsizeof(x) for x in itertools.islice(set.__iter__(obj), CENSUS_ITEMS_SIZED)]
    except Exception:
        return None
    if not sized:
        return own
    return int(own + n * sum(sized) / len(sized))


_KINDS = (list, dict, set, collections.deque)


def _container_kind(tp):
    """The builtin container ``tp`` is (or derives from), or None: from its MRO, not from
    ``isinstance``, which would ask the object for its ``__class__``."""
    if tp in _KINDS:
        return tp
    for kind in _KINDS:
        if issubclass(tp, kind):
            return kind
    return None


def _instance_dict(value):
    """``value``'s own attribute dict, or None (a class, a module, none). The target's code must
    not run here: no getattr or isinstance on its objects, whose hooks can (a deprecated
    class's wrapper warned on the target's stderr at each look: torch's
    ``torch.distributed.reduce_op``), only their types and the instance dict's slot."""
    tp = type(value)
    if issubclass(tp, type) or tp.__name__ == "module":
        return None
    try:
        attrs = object.__getattribute__(value, "__dict__")
    except Exception:
        return None
    return attrs if type(attrs) is dict else None


def _names_of(wanted):
    """{id: "module.name" or "module.name.attr"} for the objects of ``wanted`` (ids) that a
    module global, or an attribute of one, holds; CENSUS_NAME_ENTRIES entries read at most."""
    found = {}
    budget = CENSUS_NAME_ENTRIES
    for modname, mod in list(sys.modules.items()):
        try:
            entries = list(vars(mod).items())
        except Exception:
            continue
        for key, value in entries:
            budget -= 1
            if id(value) in wanted and id(value) not in found:
                found[id(value)] = "%s.%s" % (modname, key)
            attrs = _instance_dict(value)
            if attrs is not None:
                for attr, inner in list(attrs.items())[:256]:
                    budget -= 1
                    if id(inner) in wanted and id(inner) not in found:
                        found[id(inner)] = "%s.%s.%s" % (modname, key, attr)
            if budget <= 0 or len(found) == len(wanted):
                return found
    return found


def object_census(names=None):
    """What the target's heap holds now: the count of each type among the objects the garbage
    collector tracks (containers and instances: not str, bytes or numbers, which the
    containers hold), and its longest containers (lists, dicts, sets, deques: their id, kind,
    length, estimated bytes and the module global that holds them, if one does). ``names``:
    {id: name} found before, reused (a container keeps its id while it lives)."""
    started = time.perf_counter()
    # what the collector tracks, read inside C calls that hold nothing else (safe_reads.py):
    # the count of each type, then the containers alone
    counts = type_counts()
    read = time.perf_counter()
    objs = tracked_of_types(subclasses_of(*_KINDS))
    hold = max(read - started, time.perf_counter() - read)
    longest = []  # (length, index)
    for i, obj in enumerate(objs):
        try:
            n = _container_kind(type(obj)).__len__(obj)
        except Exception:
            continue
        if n >= CENSUS_MIN_LEN:
            longest.append((n, i))
        if i % 50000 == 49999:
            time.sleep(0)  # give the GIL to the target's threads between chunks
    longest.sort(reverse=True)
    top = [(n, objs[i]) for n, i in longest[:CENSUS_CONTAINERS]]
    del objs, longest
    names = dict(names or {})
    missing = {id(o) for _, o in top if id(o) not in names}
    if missing:
        names.update(_names_of(missing))
    containers = [
        [id(o), type(o).__name__, n, _container_bytes(o, n), names.get(id(o))] for n, o in top
    ]
    del top
    types = sorted(counts, key=lambda kv: -kv[1])[:CENSUS_TYPES]
    return {
        "type": "census",
        "t": time.time(),
        "objects": sum(n for _, n in counts),
        "types": [[_type_name(tp), n] for tp, n in types],
        "containers": containers,
        "cost_s": time.perf_counter() - started,
        "hold_s": hold,
    }, {c[0]: c[4] for c in containers if c[4]}


def _type_name(tp):
    mod = getattr(tp, "__module__", None)
    name = getattr(tp, "__qualname__", None) or tp.__name__
    return name if mod in (None, "builtins") else "%s.%s" % (mod, name)


class _CensusMixin:
    """The object census, one each CENSUS_EVERY_S (or as the budget allows) while started."""

    def _init_census(self):
        self.next_census = float("inf")
        self.census_names = {}

    def _start_census(self, now):
        self.next_census = now + CENSUS_FIRST_S

    def _tick_census(self, now):
        if now < self.next_census:
            return
        blocks = sys.getallocatedblocks()
        if blocks > CENSUS_MAX_BLOCKS:
            self.next_census = float("inf")
            self._status_once(
                "census", "running",
                "no object census: the heap holds %d blocks, over %d" % (blocks, CENSUS_MAX_BLOCKS),
            )  # fmt: skip
            return
        msg, self.census_names = object_census(self.census_names)
        self.next_census = time.monotonic() + max(CENSUS_EVERY_S, msg["cost_s"] / CENSUS_BUDGET)
        self._send(msg)
        if msg["hold_s"] > CENSUS_MAX_HOLD_S:
            self.next_census = float("inf")
            self._status_once(
                "census", "running",
                "no more object censuses: a read of the heap held the GIL %.0f ms at once, over %.0f"
                % (msg["hold_s"] * 1e3, CENSUS_MAX_HOLD_S * 1e3),
            )  # fmt: skip
