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

try:  # optional, faster JSON
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

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
    device_names: dict[int, str] = field(default_factory=dict)
    skipped: int = 0  # malformed events left out

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
    try:
        doc = _loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadInputFile(f"{path} is not valid JSON ({str(exc)[:80]})", "is the trace complete?") from None
    return parse_trace(doc, path)


def _int(x: Any, default: int = -1) -> int:
    return x if type(x) is int else default


def parse_trace(doc: Any, path: str = "<trace>") -> KinetoTrace:
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise BadInputFile(
            f"{path} is not a torch.profiler trace (no traceEvents list)",
            "export one with prof.export_chrome_trace(...) or torch.profiler.tensorboard_trace_handler",
        )
    names: list[str] = []
    name_ids: dict[str, int] = {}
    cols: dict[str, list[Any]] = {k: [] for k in ("cat", "name", "ts", "dur", "pid", "tid", "corr", "ext", "bytes", "dev")}
    skipped = 0
    cat_code = CAT.get
    for ev in events:
        if type(ev) is not dict or ev.get("ph") != "X":
            continue
        code = cat_code(ev.get("cat"))  # type: ignore[arg-type]
        if code is None:
            continue
        ts, dur, nm = ev.get("ts"), ev.get("dur", 0), ev.get("name")
        if type(ts) not in (int, float) or type(dur) not in (int, float) or type(nm) is not str or dur < 0:
            skipped += 1
            continue
        nid = name_ids.get(nm)
        if nid is None:
            nid = name_ids[nm] = len(names)
            names.append(nm)
        args = ev.get("args")
        if type(args) is not dict:
            args = {}
        cols["cat"].append(code)
        cols["name"].append(nid)
        cols["ts"].append(ts)
        cols["dur"].append(dur)
        cols["pid"].append(_int(ev.get("pid"), 0))
        cols["tid"].append(_int(ev.get("tid"), 0))
        cols["corr"].append(_int(args.get("correlation")))
        cols["ext"].append(_int(args.get("External id")))
        cols["bytes"].append(_int(args.get("bytes")))
        cols["dev"].append(_int(args.get("device")))
    dist = doc.get("distributedInfo")
    rank = dist.get("rank") if isinstance(dist, dict) and type(dist.get("rank")) is int else None
    props = doc.get("deviceProperties")
    device_names = {
        p["id"]: str(p.get("name"))
        for p in props if isinstance(p, dict) and type(p.get("id")) is int
    } if isinstance(props, list) else {}  # fmt: skip
    return KinetoTrace(
        path=os.fspath(path),
        names=names,
        cat=np.array(cols["cat"], dtype=np.uint8),
        name=np.array(cols["name"], dtype=np.int32),
        ts=np.array(cols["ts"], dtype=np.float64),
        dur=np.array(cols["dur"], dtype=np.float64),
        pid=np.array(cols["pid"], dtype=np.int64),
        tid=np.array(cols["tid"], dtype=np.int64),
        correlation=np.array(cols["corr"], dtype=np.int64),
        external_id=np.array(cols["ext"], dtype=np.int64),
        nbytes=np.array(cols["bytes"], dtype=np.int64),
        device=np.array(cols["dev"], dtype=np.int64),
        rank=rank,
        device_names=device_names,
        skipped=skipped,
    )
