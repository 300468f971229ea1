"""A pprof profile as ``diff`` compares it: a baseline pulled from a continuous-profiling
backend (Pyroscope, Parca) or written by ``export --format pprof``, against a fresh recording.

From CPU samples (a ``cpu`` or ``samples`` sample type): stage shares of CPU time from the
``stage`` sample label (``idle`` left out, as ``report`` does; a profile without the label is
all ``other``) and the hottest frames by self share. From an ops profile (``pprof-ops``): each
op's self host time (``cpu_time``) and each kernel's or copy's device time (``device_time``).
A pprof holds no call boundaries, so there are no latencies to compare.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from infertop.errors import BadInputFile
from infertop.model import pprof_schema as pb

IDLE = "idle"
TOP_FRAMES = 20  # as many hot frames as a report lists


def read_pprof(path: str):  # noqa: ANN201 - a generated message class
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise BadInputFile(f"{path}: {exc.strerror}") from None
    try:
        data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        prof = pb.Profile()
        prof.ParseFromString(data)
    except (OSError, EOFError, zlib.error, DecodeError) as exc:
        raise BadInputFile(
            f"{path} is not a pprof profile ({type(exc).__name__})",
            "give a profile.proto file, gzipped or not (export --format pprof writes one)",
        ) from None
    if not prof.sample_type or not prof.string_table:
        raise BadInputFile(f"{path} is not a pprof profile (no sample types)")
    return prof


@dataclass
class PprofSummary:
    """What ``diff`` reads of a pprof profile (``compare.profile`` makes it a ``Profile``)."""

    seconds: float
    stage_shares: dict[str, float] = field(default_factory=dict)  # of CPU time, idle left out
    frames: dict[tuple[str, str, int], float] = field(default_factory=dict)  # leaf -> self share
    ops: dict[str, float] = field(default_factory=dict)  # op -> self host µs
    kernels: dict[str, float] = field(default_factory=dict)  # kernel/copy -> device µs


def summarize_pprof(path: str) -> PprofSummary:
    prof = read_pprof(path)
    s = list(prof.string_table)

    def text(i: int) -> str:
        return s[i] if 0 <= i < len(s) else ""

    types = [text(t.type) for t in prof.sample_type]
    out = PprofSummary(prof.duration_nanos / 1e9)
    funcs = {f.id: (text(f.name), text(f.filename)) for f in prof.function}
    where = {}
    for loc in prof.location:
        if loc.line:  # the leaf of inlined lines is the first
            name, file = funcs.get(loc.line[0].function_id, ("?", ""))
            where[loc.id] = (name, file, loc.line[0].line)
    cpu = next((i for i, t in enumerate(types) if t in ("cpu", "samples")), None)
    if cpu is not None:
        stages: dict[str, float] = {}
        leaf: dict[tuple[str, str, int], float] = {}
        for smp in prof.sample:
            v = float(smp.value[cpu]) if cpu < len(smp.value) else 0.0
            labels = {text(lb.key): text(lb.str) for lb in smp.label}
            stage = labels.get("stage", "other")
            if stage == IDLE or v <= 0:
                continue
            stages[stage] = stages.get(stage, 0.0) + v
            if smp.location_id and smp.location_id[0] in where:
                at = where[smp.location_id[0]]
                leaf[at] = leaf.get(at, 0.0) + v
        total = sum(stages.values())
        if total > 0:
            out.stage_shares = {k: v / total for k, v in stages.items()}
            top = sorted(leaf.items(), key=lambda kv: -kv[1])[:TOP_FRAMES]
            out.frames = {k: v / total for k, v in top}
    for kind, into in (("cpu_time", out.ops), ("device_time", out.kernels)):
        if kind not in types:
            continue
        i = types.index(kind)
        for smp in prof.sample:
            if smp.location_id and smp.location_id[0] in where and smp.value[i] > 0:
                name = where[smp.location_id[0]][0]
                into[name] = into.get(name, 0.0) + smp.value[i] / 1000  # ns -> µs
    return out
