"""`infertop import`: a torch.profiler (Kineto) trace turned into a recording.

The trace's events go through the agent's own window reduction (``reduce_events``), so an
imported trace and a live session read the same way: op call paths with stages, the kernels
and copies each op launched, copies by kind, syncs and annotations. The timeline is cut into
windows at ``ProfilerStep#N`` boundaries (a step is one window: one forward, whose time
outside ops is measured as the trace report does) and other long stretches into slices of
``SLICE_S``, so replay has something to play through. An op tree stays whole in the window its outermost op
started in; device work goes with the runtime call that launched it. GPU busy time is the
union of device activity clipped to each window, so the windows' sums equal the whole trace's.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from infertop.analysis.trace_ops import cpu_nesting, steps, stretches
from infertop.errors import BadInputFile, UsageError
from infertop.model.events import Event, OpWindow
from infertop.model.fields import decode_op_window
from infertop.record.writer import RecordingWriter
from infertop.trace.table import CAT, CATEGORIES, GPU_CATS, KinetoTrace, distinct, read_trace
from infertop.words import plural

SLICE_S = 0.25  # longest window (the agent's default window length)
MAX_WINDOWS = 2000  # a long sparse trace gets longer slices instead of more windows
BATCH = 64  # op windows per record
STEP_RE = re.compile(r"^ProfilerStep#\d+$")
CPU_SIDE = ("cpu_op", "cuda_runtime", "cuda_driver", "cpu_instant_event")  # nest on their thread
KEPT = (*CPU_SIDE, "user_annotation", "kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RankInfo:
    """One trace of a directory: the process it became in the recording."""

    rank: int
    file: str
    pid: int  # in the recording (the trace's own pid unless another rank had it)
    trace_pid: int | None  # in the trace
    windows: int
    events: int


@dataclass(frozen=True)
class ImportResult:
    trace: str  # the trace file that was imported (a directory: the directory)
    output: str
    windows: int
    events: int
    seconds: float  # the trace's span
    note: str | None = None  # what was chosen or left out of a directory of traces
    ranks: tuple[RankInfo, ...] = ()  # a directory of traces: one process per rank


def read_windows(
    source: str, say: Progress, trace: KinetoTrace | None = None
) -> tuple[_Plan, list[OpWindow]]:
    """A trace file read (``trace``: already read) and reduced into op windows (of the
    target: pid 0)."""
    if trace is None:
        size = os.path.getsize(source) if os.path.isfile(source) else 0
        say(f"reading {source} ({size / 1e6:.1f} MB)")
        trace = read_trace(source)
    keep = np.isin(trace.cat, [CAT[c] for c in KEPT])
    if not keep.any():
        raise BadInputFile(
            f"{source} has no torch.profiler events (cpu_op, kernel, ...)",
            "is it a trace from torch.profiler / export_chrome_trace?",
        )
    plan = _Plan(trace, keep)
    n = len(plan.bounds) - 1
    say(f"reducing {plan.n:,} events into {n} {plural(n, 'window')}")
    windows = list(_windows(plan, say))
    if not windows:
        raise BadInputFile(f"{source} has no complete events to import")
    return plan, windows


def write_recording(output: str, prelude: list[Event], windows: list[OpWindow]) -> None:
    writer = RecordingWriter(output)
    try:
        writer.write(prelude)
        for i in range(0, len(windows), BATCH):
            writer.write(windows[i : i + BATCH])
        if writer.failed:
            raise UsageError(f"cannot write {output}: {writer.failed}")
    finally:
        writer.close()


class _Plan:
    """The trace's kept events as agent event tuples, and the windows they fall into."""

    def __init__(self, trace: KinetoTrace, keep: np.ndarray) -> None:
        self.trace = trace
        idx = np.flatnonzero(keep)
        self.n = len(idx)
        ts, dur = trace.ts[idx], trace.dur[idx]
        # nanoseconds since an integral origin, so unix ns stay exact (a float64 of unix ns
        # would round to 256 ns)
        if float(ts.max() - ts.min()) + float(dur.max()) > 1e12:  # µs: over 11 days
            raise BadInputFile(
                f"{trace.path}: its timestamps span more than 11 days; is it a torch.profiler trace?"
            )
        origin_us = float(np.floor(ts.min()))
        self.origin_ns = int(origin_us) * 1000 + trace.base_ns
        rel = np.rint((ts - origin_us) * 1000).astype(np.int64)
        dns = np.rint(dur * 1000).astype(np.int64)
        self.idx, self.rel, self.dns = idx, rel, dns
        self.cats = trace.cat[idx]
        self.t0 = self._unix(int(rel.min()))
        self.t1 = self._unix(int((rel + dns).max()))
        cpu = trace.cat == CAT["cpu_op"]
        self.pid: int | None = None
        if cpu.any():
            pids, counts = np.unique(trace.pid[cpu], return_counts=True)
            self.pid = int(pids[int(np.argmax(counts))])
        self.bounds = self._bounds()
        self.window_of = self._assign()
        self.main_ops = self._main_ops(origin_us)
        self.step_time = self._step_times(origin_us)

    def _main_ops(self, origin_us: float) -> tuple[int, np.ndarray, np.ndarray, np.ndarray] | None:
        """The op thread's top-level ops, as trace_ops.time_outside_ops picks them: (thread,
        starts µs, ends µs, starts in relative ns), by start; None without CPU ops."""
        t = self.trace
        if not (t.cat == CAT["cpu_op"]).any():
            return None
        nest = cpu_nesting(t)
        top = nest.idx[nest.depth == 0]
        tids, inverse = np.unique(t.tid[top], return_inverse=True)
        main = tids[np.argmax(np.bincount(inverse, weights=t.dur[top]))]
        top = top[t.tid[top] == main]
        top = top[np.argsort(t.ts[top], kind="stable")]
        starts, ends = t.ts[top], t.ts[top] + t.dur[top]
        return int(main), starts, ends, np.rint((starts - origin_us) * 1000).astype(np.int64)

    def stretch_time(self, a: int, b: int) -> dict[str, float] | None:
        """op_time of window [a, b) (relative ns) without steps, as the trace report measures
        it: the op thread's top-level ops that start in it, in stretches of model work."""
        if self.main_ops is None:
            return None
        _, starts, ends, rel = self.main_ops
        lo, hi = np.searchsorted(rel, [a, b])
        if hi <= lo:
            return None
        s, e = starts[lo:hi], ends[lo:hi]
        wall = sum(y - x for x, y in stretches(s, e))
        in_ops = float((e - s).sum())
        return {"ops": int(hi - lo), "in_ops_us": min(in_ops, wall), "wall_us": wall}

    def _step_times(self, origin_us: float) -> dict[tuple[int, int], dict[str, float]]:
        """op_time of each ProfilerStep#N window on the op thread, the way the trace report
        measures time outside ops (trace_ops.time_outside_ops): top-level ops clipped to it."""
        if not self.steps or self.main_ops is None:
            return {}
        main, starts, ends, _ = self.main_ops
        out = {}
        for s in steps(self.trace):
            if s.tid != main:
                continue
            a = int(np.rint((s.ts - origin_us) * 1000))
            key = (a, a + int(np.rint(s.dur * 1000)))
            lo, hi = np.clip(starts, s.ts, s.ts + s.dur), np.clip(ends, s.ts, s.ts + s.dur)
            inside = hi > lo
            out[key] = {"ops": int(inside.sum()), "in_ops_us": float((hi - lo)[inside].sum()),
                        "wall_us": float(s.dur)}  # fmt: skip
        return out

    def _unix(self, rel_ns: int) -> float:
        return (self.origin_ns + rel_ns) / 1e9

    def _bounds(self) -> list[int]:
        """Window edges in relative ns: the trace's ends, step edges, then slices."""
        t = self.trace
        self.steps: set[tuple[int, int]] = set()  # ProfilerStep#N (start, end)
        lo, hi = int(self.rel.min()), int((self.rel + self.dns).max()) + 1
        edges = {lo, hi}
        ua = np.flatnonzero(self.cats == CAT["user_annotation"])
        for j in ua:
            if STEP_RE.match(t.names[t.name[self.idx[j]]]):
                step = (int(self.rel[j]), int(self.rel[j] + self.dns[j]))
                self.steps.add(step)
                edges.update(e for e in step if lo < e < hi)
        slice_ns = max(int(SLICE_S * 1e9), (hi - lo) // MAX_WINDOWS + 1)
        out: list[int] = []
        ordered = sorted(edges)
        for a, b in zip(ordered, ordered[1:]):  # a step stays one window: one forward
            pieces = 1 if (a, b) in self.steps else max(1, -(-(b - a) // slice_ns))
            out += [a + (b - a) * k // pieces for k in range(pieces)]
        out.append(hi)
        return out

    def _assign(self) -> np.ndarray:
        """Window index per kept event (-1: every window it overlaps, for annotations)."""
        t = self.trace
        root = self.rel.copy()  # the start of the outermost CPU event around each event
        cpu = np.isin(self.cats, [CAT[c] for c in CPU_SIDE])
        pos = np.flatnonzero(cpu)
        order = np.lexsort((-self.dns[pos], self.rel[pos], t.tid[self.idx[pos]], t.pid[self.idx[pos]]))
        pos = pos[order]
        thread = np.stack([t.pid[self.idx[pos]], t.tid[self.idx[pos]]], axis=1).tolist()
        starts, ends = self.rel[pos].tolist(), (self.rel[pos] + self.dns[pos]).tolist()
        key, reach, start = None, -1, 0
        roots = [0] * len(pos)
        for k in range(len(pos)):
            if thread[k] != key or starts[k] >= reach:
                key, reach, start = thread[k], ends[k], starts[k]
            elif ends[k] > reach:
                reach = ends[k]
            roots[k] = start
        root[pos] = roots
        bounds = np.asarray(self.bounds, dtype=np.int64)
        window = np.searchsorted(bounds, root, side="right") - 1
        window = np.clip(window, 0, len(bounds) - 2)
        # device work goes where the runtime call that launched it went
        corr = t.correlation[self.idx]
        rt = np.isin(self.cats, [CAT["cuda_runtime"], CAT["cuda_driver"]]) & (corr >= 0)
        launched = dict(zip(corr[rt].tolist(), window[rt].tolist()))
        gpu = np.flatnonzero(np.isin(self.cats, GPU_CATS) & (corr >= 0))
        for j, c in zip(gpu.tolist(), corr[gpu].tolist()):
            w = launched.get(c)
            if w is not None:
                window[j] = w
        window[self.cats == CAT["user_annotation"]] = -1
        return window

    def tuples(self) -> list[tuple]:
        """The agent's event tuples (kind, name, tid, start_ns, dur_ns, ident, link, bytes, shapes)."""
        t = self.trace
        idx = self.idx
        kinds = [CATEGORIES[c] for c in self.cats.tolist()]
        names = [t.names[i] for i in t.name[idx].tolist()]
        corr, ext = t.correlation[idx].tolist(), t.external_id[idx].tolist()
        nbytes = t.nbytes[idx].tolist()
        devices = t.device[idx].tolist()
        tids = t.tid[idx].tolist()
        starts = (self.rel + self.origin_ns).tolist()
        durs = self.dns.tolist()
        out: list[tuple] = []
        for k in range(self.n):
            kind = kinds[k]
            if kind == "cpu_instant_event":  # a [memory] event: signed bytes, its device
                device = "cuda" if devices[k] == 1 else "cpu"
                out.append(("memory", names[k], tids[k], starts[k], 0, 0, 0, nbytes[k], device))
                continue
            if kind == "cpu_op" or kind == "user_annotation":
                ident, link = max(ext[k], 0), 0
            else:
                ident, link = max(corr[k], 0), max(ext[k], 0)
            out.append((kind, names[k], tids[k], starts[k], durs[k], ident, link, max(nbytes[k], 0), None))
        return out


def _windows(plan: _Plan, say: Progress) -> list[OpWindow]:
    from infertop.agent.payload import reduce_events  # the agent's own reduction

    bounds = plan.bounds
    nwin = len(bounds) - 1
    events = plan.tuples()
    per: list[list[tuple]] = [[] for _ in range(nwin)]
    window = plan.window_of.tolist()
    for k, w in enumerate(window):
        if w >= 0:
            per[w].append(events[k])
            continue
        a, b = plan.rel[k], plan.rel[k] + plan.dns[k]  # an annotation: every window it overlaps
        first = max(0, bisect_right(bounds, int(a)) - 1)
        for w2 in range(first, nwin):
            if bounds[w2] > b:
                break
            per[w2].append(events[k])
    gpu = _GpuBusy(plan)
    device = bool(plan.trace.has_gpu)
    out = []
    step = max(1, nwin // 10)
    for w in range(nwin):
        if w and w % step == 0:
            say(f"{100 * w // nwin}% ({w} of {nwin} {plural(nwin, 'window')})")
        a, b = bounds[w], bounds[w + 1]
        activity = gpu.between(a, b)
        own = [e for e in per[w] if e[0] != "user_annotation"]
        if not own and activity is None:
            continue
        t_start, t_end = plan._unix(a), plan._unix(b)
        body = reduce_events(per[w], t_start, t_end, device_profiled=device)
        # an annotation is listed once, in the window it starts in
        ann = [r for r in body["annotations"] if t_start <= r[2] < t_end]
        # time outside ops as the trace report measures it (not the agent's live op_time, which
        # also allows for a sampler stopping the thread): per step, else per stretch
        op_time = plan.step_time.get((a, b)) if plan.steps else plan.stretch_time(a, b)
        fields = {**body, "t_start": t_start, "t_end": t_end, "source": "kineto", "events": len(own),
                  "truncated": False, "annotations": ann, "gpu": activity, "op_time": op_time}  # fmt: skip
        out.append(decode_op_window(fields))
    return out


class _GpuBusy:
    """Device activity (union of kernels, copies, memsets per device) clipped to a window."""

    def __init__(self, plan: _Plan) -> None:
        self.devices = []
        m = np.isin(plan.cats, GPU_CATS)
        dev = plan.trace.pid[plan.idx]
        for d in distinct(dev[m]):
            sel = m & (dev == d)
            s, e = plan.rel[sel], plan.rel[sel] + plan.dns[sel]
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
            reach = np.maximum.accumulate(e)
            new = np.r_[True, s[1:] > reach[:-1]]
            at = np.flatnonzero(new)
            bs, be = s[at], np.maximum.reduceat(e, at)
            covered = np.r_[0, np.cumsum(be - bs)]  # busy time before block i
            self.devices.append((bs, be, covered))

    @staticmethod
    def _busy_before(bs: np.ndarray, be: np.ndarray, covered: np.ndarray, t: int) -> int:
        i = int(np.searchsorted(bs, t, side="right"))  # blocks starting at or before t
        if i == 0:
            return 0
        return int(covered[i - 1] + min(be[i - 1], t) - bs[i - 1])

    @staticmethod
    def _longest_gap(bs: np.ndarray, be: np.ndarray, lo: int, hi: int) -> int:
        """The longest idle stretch inside [lo, hi)."""
        i = int(np.searchsorted(be, lo, side="right"))  # first block ending after lo
        j = int(np.searchsorted(bs, hi, side="left")) - 1  # last block starting before hi
        if i > j:
            return hi - lo
        gap = max(int(bs[i]) - lo, hi - int(be[j]), 0)
        if j > i:
            inner = np.minimum(bs[i + 1 : j + 1], hi) - np.maximum(be[i:j], lo)
            gap = max(gap, int(inner.max()))
        return gap

    def between(self, a: int, b: int) -> dict[str, float] | None:
        busy = span = 0
        gap = 0
        for bs, be, covered in self.devices:
            lo, hi = max(a, int(bs[0])), min(b, int(be[-1]))
            if hi <= lo:
                continue
            span += hi - lo
            busy += self._busy_before(bs, be, covered, hi) - self._busy_before(bs, be, covered, lo)
            gap = max(gap, self._longest_gap(bs, be, lo, hi))
        if span == 0:
            return None
        return {"busy_us": busy / 1000.0, "span_us": span / 1000.0, "max_gap_us": max(0, gap) / 1000.0}
