"""Reading torch.profiler (Kineto) traces into one columnar table, fast.

A trace is parsed once into ``KinetoTrace``: numpy columns over its complete (``ph: X``) events
with a name table, plus the trace's metadata. Analyses (``trace/gpu.py``) are functions over
it. No per-event Python objects survive parsing. Malformed input is ``BadInputFile`` (exit 5).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertop.errors import BadInputFile
from infertop.trace.files import trace_bytes

try:  # typed decoding that skips what we do not need: ~3x faster than json.loads
    import msgspec

    _MSGSPEC = True
except ImportError:  # pragma: no cover - msgspec is a dependency; be robust anyway
    _MSGSPEC = False

#: event categories we keep, with their small-int codes
CATEGORIES = (
    "cpu_op",
    "user_annotation",
    "python_function",
    "cuda_runtime",
    "cuda_driver",
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "cuda_sync",
    "gpu_user_annotation",
    # only its "[memory]" events (profile_memory's allocations and frees; instant, dur 0):
    # nbytes holds their signed "Bytes", device their "Device Type" (0 CPU, 1 CUDA)
    "cpu_instant_event",
)
MEMORY_EVENT = "[memory]"
CAT = {c: i for i, c in enumerate(CATEGORIES)}
GPU_CATS = (CAT["kernel"], CAT["gpu_memcpy"], CAT["gpu_memset"])


@dataclass
class KinetoTrace:
    """Columns over the trace's complete events (times in µs, as Kineto writes them)."""

    path: str
    names: list[str]
    cat: np.ndarray  # uint8 code into CATEGORIES
    name: np.ndarray  # int32 index into names
    ts: np.ndarray  # float64 µs
    dur: np.ndarray  # float64 µs
    pid: np.ndarray  # int64 (GPU events: device id)
    tid: np.ndarray  # int64 (GPU events: stream)
    correlation: np.ndarray  # int64, -1 if none
    external_id: np.ndarray  # int64, -1 if none
    nbytes: np.ndarray  # int64, -1 if none (memcpy/memset; memory events: signed)
    device: np.ndarray  # int64, -1 if none (memory events: their device type)
    rank: int | None = None
    base_ns: int = 0  # ``baseTimeNanoseconds``: added to ``ts`` it gives unix time (0: ts is)
    device_names: dict[int, str] = field(default_factory=dict)
    skipped: int = 0  # malformed events left out
    cache: dict[str, Any] = field(default_factory=dict, repr=False)  # analyses shared per trace

    def __len__(self) -> int:
        return len(self.cat)

    def of(self, *cats: str) -> np.ndarray:
        """Boolean mask of the events in these categories."""
        codes = [CAT[c] for c in cats]
        return np.isin(self.cat, codes)

    @property
    def has_gpu(self) -> bool:
        return bool(np.isin(self.cat, GPU_CATS).any())


def distinct(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``a``: ``np.unique`` without its first-call import of
    ``numpy.ma`` (~15 ms of a report's start-up)."""
    s = np.sort(a, kind="stable")
    return s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s


def read_trace(path: str, data: bytes | None = None) -> KinetoTrace:
    """Parse a ``.json`` or ``.json.gz`` Kineto trace (``data``: its bytes, already read and
    gunzipped, e.g. by ``trace.files.Prefetch``)."""
    raw = trace_bytes(path) if data is None else data
    fast = _decode_fast(raw)
    if fast is not None:
        return _build(fast, path)
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadInputFile(f"{path} is not valid JSON ({str(exc)[:80]})", "is the trace complete?") from None
    return parse_trace(doc, path)


if _MSGSPEC:

    # gc=False: the 100k+ event structs are plain data; tracking them would cost the collector
    # passes over every one while the trace decodes (half the decode time)
    class _Args(msgspec.Struct, gc=False):
        correlation: Any = None
        external_id: Any = msgspec.field(default=None, name="External id")
        bytes: Any = None
        device: Any = None
        mem_bytes: Any = msgspec.field(default=None, name="Bytes")  # a [memory] event's
        device_type: Any = msgspec.field(default=None, name="Device Type")

    class _Event(msgspec.Struct, gc=False):
        ph: Any = None
        cat: Any = None
        name: Any = None
        ts: Any = None
        dur: Any = 0
        pid: Any = None
        tid: Any = None
        args: _Args | None = None  # a typed struct: the many other args are skipped, not built

    class _Trace(msgspec.Struct, gc=False):
        traceEvents: list[_Event]
        distributedInfo: Any = None
        deviceProperties: Any = None
        baseTimeNanoseconds: Any = None

    _DECODER = msgspec.json.Decoder(_Trace)


def _decode_fast(raw: bytes) -> Any:
    """The typed decode, or None when the document is not shaped as expected (then the
    general path decides whether it is a trace at all)."""
    if not _MSGSPEC:
        return None
    try:
        return _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _build(doc: Any, path: str) -> KinetoTrace:
    """Columns from the typed decode: one comprehension per column (no per-event tuples).
    Well-formed events are taken as they are; only when a column does not convert are the
    malformed events looked for and left out."""
    kept = [
        e for e in doc.traceEvents
        if (e.ph == "X" and type(e.cat) is str and e.cat in CAT)
        or (e.ph == "i" and e.name == MEMORY_EVENT and e.cat == "cpu_instant_event")
    ]  # fmt: skip
    try:
        return _event_columns(kept, doc, path, 0)
    except (TypeError, ValueError, OverflowError):
        number = (int, float)
        good = [
            e for e in kept
            if type(e.ts) in number and type(e.dur) in number and type(e.name) is str
            and e.dur >= 0 and _finite(e.ts) and _finite(e.dur)
        ]  # fmt: skip
        return _event_columns(good, doc, path, len(kept) - len(good))


def _event_columns(events: list[Any], doc: Any, path: str, skipped: int) -> KinetoTrace:
    """Raises TypeError / ValueError when an event's name, ts or dur is not what it must be."""
    name_ids: dict[str, int] = {}
    ids = [name_ids.setdefault(e.name, len(name_ids)) for e in events]
    if any(type(n) is not str for n in name_ids):
        raise ValueError("an event name is not a string")
    ts = np.array([e.ts for e in events], dtype=np.float64)
    dur = np.array([e.dur for e in events], dtype=np.float64)
    if (dur < 0).any() or not (np.isfinite(ts).all() and np.isfinite(dur).all()):
        raise ValueError("a negative or non-finite time")
    args = [e.args for e in events]

    def arg(field: str, other: str | None = None) -> np.ndarray:
        """``field``'s value, else (a [memory] event's) ``other``'s."""
        values = [None if a is None else getattr(a, field) for a in args]
        if other is not None:
            values = [getattr(a, other) if v is None and a is not None else v for v, a in zip(values, args)]
        return _int_column(values, -1)

    return _trace(
        path, list(name_ids),
        np.array([CAT[e.cat] for e in events], dtype=np.uint8),
        np.array(ids, dtype=np.int32), ts, dur,
        _int_column([e.pid for e in events], 0),
        _int_column([e.tid for e in events], 0),
        arg("correlation"), arg("external_id"), arg("bytes", "mem_bytes"), arg("device", "device_type"),
        doc.distributedInfo, doc.deviceProperties, doc.baseTimeNanoseconds, skipped,
    )  # fmt: skip


def _finite(x: float) -> bool:
    return x - x == 0  # False for inf and nan


def _int_column(values: list[Any], default: int) -> np.ndarray:
    """Integers as int64; anything else (and integers past 64 bits) as ``default``."""
    col = [v if type(v) is int else default for v in values]
    try:
        return np.array(col, dtype=np.int64)
    except OverflowError:
        return np.array([v if -(2**63) <= v < 2**63 else default for v in col], dtype=np.int64)


def _int(x: Any, default: int = -1) -> int:
    return x if type(x) is int and -(2**63) <= x < 2**63 else default


def parse_trace(doc: Any, path: str = "<trace>") -> KinetoTrace:
    """Columns from an already decoded trace document (the general, tolerant path)."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise BadInputFile(
            f"{path} is not a torch.profiler trace (no traceEvents list)",
            "export one with prof.export_chrome_trace(...) or torch.profiler.tensorboard_trace_handler",
        )

    def rows() -> Any:
        for ev in events:
            if type(ev) is dict:
                a = ev.get("args")
                extra = (
                    (_int(a.get("correlation")), _int(a.get("External id")),
                     _int(a.get("bytes", a.get("Bytes"))), _int(a.get("device", a.get("Device Type"))))
                    if type(a) is dict else None
                )  # fmt: skip
                yield (ev.get("ph"), ev.get("cat"), ev.get("name"), ev.get("ts"), ev.get("dur", 0),
                       ev.get("pid"), ev.get("tid"), extra)  # fmt: skip

    return _columns(
        rows(), doc.get("distributedInfo"), doc.get("deviceProperties"), path,
        doc.get("baseTimeNanoseconds"),
    )  # fmt: skip


def _columns(rows: Any, dist: Any, props: Any, path: str, base: Any = None) -> KinetoTrace:
    names: list[str] = []
    name_ids: dict[str, int] = {}
    out: list[tuple[Any, ...]] = []
    append = out.append
    skipped = 0
    cat_code = CAT.get
    number = (int, float)
    no_args = (-1, -1, -1, -1)
    for ph, cat, nm, ts, dur, pid, tid, extra in rows:
        if ph != "X" and not (ph == "i" and nm == MEMORY_EVENT and cat == "cpu_instant_event"):
            continue
        code = cat_code(cat) if type(cat) is str else None
        if code is None:
            continue
        if (type(ts) not in number or type(dur) not in number or type(nm) is not str or dur < 0
                or not _finite(ts) or not _finite(dur)):  # fmt: skip
            skipped += 1
            continue
        nid = name_ids.get(nm)
        if nid is None:
            nid = name_ids[nm] = len(names)
            names.append(nm)
        append((code, nid, ts, dur, _int(pid, 0), _int(tid, 0), *(extra or no_args)))
    # one float64 table, then typed columns (µs timestamps since the epoch fit in 53 bits)
    table = np.array(out, dtype=np.float64).reshape(-1, 10)
    ints = table[:, [0, 1, 4, 5, 6, 7, 8, 9]].astype(np.int64)
    pids, tids, correlation, external_id, nbytes, device = (
        np.ascontiguousarray(ints[:, k]) for k in range(2, 8)
    )
    return _trace(
        path, names, ints[:, 0].astype(np.uint8), ints[:, 1].astype(np.int32),
        np.ascontiguousarray(table[:, 2]), np.ascontiguousarray(table[:, 3]),
        pids, tids, correlation, external_id, nbytes, device,
        dist, props, base, skipped,
    )  # fmt: skip


def _trace(
    path: str, names: list[str], cat: np.ndarray, name: np.ndarray, ts: np.ndarray,
    dur: np.ndarray, pid: np.ndarray, tid: np.ndarray, correlation: np.ndarray,
    external_id: np.ndarray, nbytes: np.ndarray, device: np.ndarray,
    dist: Any, props: Any, base: Any, skipped: int,
) -> KinetoTrace:  # fmt: skip
    rank = dist.get("rank") if isinstance(dist, dict) and type(dist.get("rank")) is int else None
    device_names = {
        p["id"]: str(p.get("name"))
        for p in props if isinstance(p, dict) and type(p.get("id")) is int
    } if isinstance(props, list) else {}  # fmt: skip
    return KinetoTrace(
        path=os.fspath(path), names=names, cat=cat, name=name, ts=ts, dur=dur, pid=pid, tid=tid,
        correlation=correlation, external_id=external_id, nbytes=nbytes, device=device,
        rank=rank, base_ns=base if type(base) is int and base > 0 else 0,
        device_names=device_names, skipped=skipped,
    )  # fmt: skip
