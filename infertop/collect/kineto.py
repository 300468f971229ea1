"""Reading torch.profiler (Kineto) traces into one columnar table, fast.

A trace is parsed once into ``KinetoTrace``: numpy columns over its complete (``ph: X``) events
with a name table, plus the trace's metadata. Analyses (``analysis/gpu.py``) are functions over
it. No per-event Python objects survive parsing. Malformed input is ``BadInputFile`` (exit 5).
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertop.errors import BadInputFile

try:  # typed decoding that skips what we do not need: ~3x faster than json.loads
    import msgspec
except ImportError:  # pragma: no cover - msgspec is a dependency; be robust anyway
    msgspec = None

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
)
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
    nbytes: np.ndarray  # int64, -1 if none (memcpy/memset)
    device: np.ndarray  # int64, -1 if none
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


def read_trace(path: str) -> KinetoTrace:
    """Parse a ``.json`` or ``.json.gz`` Kineto trace."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise BadInputFile(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInputFile(f"{path} is a directory; pass one trace file") from None
    except OSError as exc:
        raise BadInputFile(f"cannot read {path}: {exc.strerror}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadInputFile(f"{path}: damaged gzip data ({exc})") from None
    fast = _decode_fast(raw)
    if fast is not None:
        return _build(fast, path)
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadInputFile(f"{path} is not valid JSON ({str(exc)[:80]})", "is the trace complete?") from None
    return parse_trace(doc, path)


if msgspec is not None:

    class _Args(msgspec.Struct):
        correlation: Any = None
        external_id: Any = msgspec.field(default=None, name="External id")
        bytes: Any = None
        device: Any = None

    class _Event(msgspec.Struct):
        ph: Any = None
        cat: Any = None
        name: Any = None
        ts: Any = None
        dur: Any = 0
        pid: Any = None
        tid: Any = None
        args: _Args | None = None  # a typed struct: the many other args are skipped, not built

    class _Trace(msgspec.Struct):
        traceEvents: list[_Event]
        distributedInfo: Any = None
        deviceProperties: Any = None
        baseTimeNanoseconds: Any = None

    _DECODER = msgspec.json.Decoder(_Trace)


def _decode_fast(raw: bytes) -> Any:
    """The typed decode, or None when the document is not shaped as expected (then the
    general path decides whether it is a trace at all)."""
    if msgspec is None:
        return None
    try:
        return _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _build(doc: Any, path: str) -> KinetoTrace:
    def rows() -> Any:
        for ev in doc.traceEvents:
            a = ev.args
            extra = None if a is None else (
                _int(a.correlation), _int(a.external_id), _int(a.bytes), _int(a.device)
            )  # fmt: skip
            yield ev.ph, ev.cat, ev.name, ev.ts, ev.dur, ev.pid, ev.tid, extra

    return _columns(rows(), doc.distributedInfo, doc.deviceProperties, path, doc.baseTimeNanoseconds)


def _int(x: Any, default: int = -1) -> int:
    return x if type(x) is int else default


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
                     _int(a.get("bytes")), _int(a.get("device")))
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
        if ph != "X":
            continue
        code = cat_code(cat) if type(cat) is str else None
        if code is None:
            continue
        if type(ts) not in number or type(dur) not in number or type(nm) is not str or dur < 0:
            skipped += 1
            continue
        nid = name_ids.get(nm)
        if nid is None:
            nid = name_ids[nm] = len(names)
            names.append(nm)
        append((code, nid, ts, dur, pid if type(pid) is int else 0, tid if type(tid) is int else 0,
                *(extra or no_args)))  # fmt: skip
    # one float64 table, then typed columns (µs timestamps since the epoch fit in 53 bits)
    table = np.array(out, dtype=np.float64).reshape(-1, 10)
    ints = table[:, [0, 1, 4, 5, 6, 7, 8, 9]].astype(np.int64)
    rank = dist.get("rank") if isinstance(dist, dict) and type(dist.get("rank")) is int else None
    device_names = {
        p["id"]: str(p.get("name"))
        for p in props if isinstance(p, dict) and type(p.get("id")) is int
    } if isinstance(props, list) else {}  # fmt: skip
    return KinetoTrace(
        path=os.fspath(path),
        names=names,
        cat=ints[:, 0].astype(np.uint8),
        name=ints[:, 1].astype(np.int32),
        ts=np.ascontiguousarray(table[:, 2]),
        dur=np.ascontiguousarray(table[:, 3]),
        pid=np.ascontiguousarray(ints[:, 2]),
        tid=np.ascontiguousarray(ints[:, 3]),
        correlation=np.ascontiguousarray(ints[:, 4]),
        external_id=np.ascontiguousarray(ints[:, 5]),
        nbytes=np.ascontiguousarray(ints[:, 6]),
        device=np.ascontiguousarray(ints[:, 7]),
        rank=rank,
        base_ns=base if type(base) is int and base > 0 else 0,
        device_names=device_names,
        skipped=skipped,
    )
