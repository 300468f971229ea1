"""Building one pprof profile: its string table, functions, locations and samples, each
interned, and identical samples (same stack, same labels) summed into one; ``CpuProfile``
builds one of CPU samples."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Collection, Sequence

from infertop.model import pprof_schema as pb
from infertop.model.events import Frame, SampleWindow, window_ticks

#: the one mapping every location sits in: the functions are known, nothing is symbolized
MAPPING_ID = 1


class ProfileBuilder:
    def __init__(
        self,
        sample_types: Sequence[tuple[str, str]],
        period_type: tuple[str, str],
        period: int,
        program: str = "python",
    ) -> None:
        """``sample_types``: (type, unit) per value of a sample, e.g. ``("cpu", "nanoseconds")``;
        ``period_type`` and ``period``: what one sample stands for."""
        self._strings: dict[str, int] = {"": 0}
        self._functions: dict[tuple[str, str], int] = {}
        self._locations: dict[tuple[str, str, int], int] = {}
        self._samples: dict[tuple[tuple[int, ...], tuple[tuple[str, str], ...]], list[float]] = {}
        self.width = len(sample_types)
        self.profile = pb.Profile()
        for t, u in sample_types:
            self.profile.sample_type.add(type=self.s(t), unit=self.s(u))
        self.profile.period_type.type = self.s(period_type[0])
        self.profile.period_type.unit = self.s(period_type[1])
        self.profile.period = max(1, int(period))
        self.profile.mapping.add(
            id=MAPPING_ID, filename=self.s(program), has_functions=True, has_filenames=True,
            has_line_numbers=True,
        )  # fmt: skip

    def s(self, text: str) -> int:
        """The string's index in the string table."""
        i = self._strings.get(text)
        if i is None:
            i = self._strings[text] = len(self._strings)
        return i

    def location(self, function: str, file: str = "", line: int = 0) -> int:
        """The id of the location of one frame (``function`` in ``file`` at ``line``)."""
        key = (function, file, line)
        loc = self._locations.get(key)
        if loc is not None:
            return loc
        fkey = (function, file)
        fid = self._functions.get(fkey)
        if fid is None:
            fid = self._functions[fkey] = len(self._functions) + 1
            self.profile.function.add(
                id=fid, name=self.s(function), system_name=self.s(function), filename=self.s(file)
            )
        loc = self._locations[key] = len(self._locations) + 1
        self.profile.location.add(
            id=loc, mapping_id=MAPPING_ID, line=[pb.Line(function_id=fid, line=max(0, line))]
        )
        return loc

    def add(
        self,
        stack: tuple[int, ...],
        values: Sequence[float],
        labels: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """One sample of ``stack`` (location ids, leaf first) with ``values`` (one per sample
        type) and string ``labels`` (key, value); added to an identical one already there."""
        key = (stack, labels)
        acc = self._samples.get(key)
        if acc is None:
            self._samples[key] = list(values)
        else:
            for i, v in enumerate(values):
                acc[i] += v

    @property
    def samples(self) -> int:
        return len(self._samples)

    def encode(
        self,
        time_nanos: int,
        duration_nanos: int,
        comments: Sequence[str] = (),
        default_sample_type: str | None = None,
    ) -> bytes:
        """The profile, serialized and gzipped (as pprof files are)."""
        prof = self.profile
        for (stack, labels), values in self._samples.items():
            prof.sample.add(
                location_id=stack,
                value=[round(v) for v in values],
                label=[pb.Label(key=self.s(k), str=self.s(v)) for k, v in labels],
            )
        self._samples.clear()
        prof.time_nanos = int(time_nanos)
        prof.duration_nanos = max(0, int(duration_nanos))
        prof.comment.extend(self.s(c) for c in comments)
        if default_sample_type is not None:
            prof.default_sample_type = self.s(default_sample_type)
        prof.string_table.extend(self._strings)  # insertion order = index order
        return gzip.compress(prof.SerializeToString(), compresslevel=6, mtime=0)


NS = 1_000_000_000
CPU_TYPES = (("samples", "count"), ("cpu", "nanoseconds"))

#: a stack's stage: (stack id, its frames innermost first) -> stage name
StageOf = Callable[[int, Sequence[Frame]], str]


class CpuProfile:
    """The CPU samples of a run of windows as one pprof profile: one location per Python frame
    (leaf first), values ``samples/count`` and ``cpu/nanoseconds`` (samples × the window's
    sample period), labels ``stage``, ``thread`` and, when ``process_of`` is given, ``process``.
    ``export --format pprof`` writes one for a whole recording, ``--push`` one per interval."""

    def __init__(self, rate_hz: float, program: str = "python") -> None:
        self.rate_hz = rate_hz or 100.0
        self.builder = ProfileBuilder(CPU_TYPES, CPU_TYPES[1], round(NS / self.rate_hz), program)
        self._located: dict[int, tuple[int, ...]] = {}  # stack id -> location ids, leaf first
        self.windows = 0

    def add_window(
        self,
        w: SampleWindow,
        frames: Sequence[Frame],
        stacks: Sequence[tuple[int, ...]],
        stage_of: StageOf,
        thread_of: Callable[[int], str],
        process_of: Callable[[int], str] | None = None,
        tids: Collection[int] | None = None,
    ) -> int:
        """A CPU window's samples (its frames and stacks known); only those of ``tids`` when
        given. Returns the samples added."""
        b = self.builder
        period_ns = (w.t_end - w.t_start) * NS / window_ticks(w)
        added = 0
        for tid, sid, n in w.counts:
            if n <= 0 or not 0 <= sid < len(stacks) or (tids is not None and tid not in tids):
                continue
            locs = self._located.get(sid)
            if locs is None:
                fr = [frames[f] for f in reversed(stacks[sid])]
                locs = self._located[sid] = tuple(
                    b.location(f.function, f.file, f.line) for f in fr
                )
            labels: tuple[tuple[str, str], ...] = (
                ("stage", stage_of(sid, [frames[f] for f in stacks[sid]])),
                ("thread", thread_of(tid)),
            )
            if process_of is not None:
                labels += (("process", process_of(tid)),)
            b.add(locs, (n, n * period_ns), labels)
            added += n
        self.windows += 1
        return added

    @property
    def samples(self) -> int:
        return self.builder.samples

    def encode(self, t_start: float, t_end: float, comments: Sequence[str] = ()) -> bytes:
        return self.builder.encode(
            round(t_start * NS), round((t_end - t_start) * NS), comments, "cpu"
        )


def program_name(cmdline: str | None) -> str:
    """The profile's main binary: the command's first word, its folders cut."""
    prog = (cmdline or "").split(" ", 1)[0].rsplit("/", 1)[-1]
    return prog or "python"
