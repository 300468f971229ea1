"""The CPU side of a Kineto trace: the ops table, steps, and time outside torch ops.

Self time needs nesting, which is per thread: events are sorted by (thread, start, -duration)
and walked once with a stack — O(n log n) in numpy for the sort, one Python pass for the walk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from infertop.model.rows import OpRow
from infertop.trace.table import CAT, KinetoTrace

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
#: with no ProfilerStep marks, top-level ops less than this apart are one stretch of model
#: work and a longer gap is another stage or waiting: the agent's ``OP_GAP_NS`` in µs
OP_GAP_US = 1000.0


@dataclass(frozen=True)
class Span:
    name: str
    tid: int
    ts: float
    dur: float


@dataclass(frozen=True)
class Nesting:
    """CPU ops in (pid, tid, ts, -dur) order with self time, depth and parent position."""

    idx: np.ndarray  # event indices into the trace
    self_us: np.ndarray
    depth: np.ndarray
    parent: np.ndarray  # position in ``idx`` of the enclosing op, -1 at top level


def cpu_nesting(trace: KinetoTrace) -> Nesting:
    """Computed once per trace (cached on it): every CPU-op analysis shares it."""
    cached = trace.cache.get("cpu_nesting")
    if cached is None:
        cached = trace.cache["cpu_nesting"] = _nesting(trace, trace.cat == CAT["cpu_op"])
    return cached


def _nesting(trace: KinetoTrace, mask: np.ndarray) -> Nesting:
    idx = np.flatnonzero(mask)
    order = np.lexsort((-trace.dur[idx], trace.ts[idx], trace.tid[idx], trace.pid[idx]))
    idx = idx[order]
    n = len(idx)
    # plain lists: indexing numpy arrays one element at a time costs several times more
    dur = trace.dur[idx].tolist()
    ts = trace.ts[idx].tolist()
    end = [a + b for a, b in zip(ts, dur)]
    pid, tid = trace.pid[idx], trace.tid[idx]
    new_thread = np.r_[True, (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])].tolist() if n else []
    self_t = list(dur)
    depth = [0] * n
    parent = [-1] * n
    stack: list[int] = []
    for i in range(n):
        if new_thread[i]:
            stack = []
        t0 = ts[i]
        while stack and t0 >= end[stack[-1]]:
            stack.pop()
        if stack:
            p = stack[-1]
            e = end[p] - t0
            self_t[p] -= dur[i] if dur[i] < e else e
            depth[i] = len(stack)
            parent[i] = p
        stack.append(i)
    self_arr = np.maximum(np.array(self_t, dtype=np.float64), 0.0)
    return Nesting(idx, self_arr, np.array(depth, dtype=np.int32), np.array(parent, dtype=np.int64))


def enclosing_ops(trace: KinetoTrace, mask: np.ndarray) -> list[int | None]:
    """For each masked event, the innermost CPU op on its thread that encloses it (or None)."""
    n = cpu_nesting(trace)
    queries = np.flatnonzero(mask)
    if not len(n.idx):
        return [None] * len(queries)
    ts, end, bounds = _op_threads(trace, n)
    q_start, q_end = trace.ts[queries], trace.ts[queries] + trace.dur[queries]
    span = [bounds.get(k, (0, 0)) for k in zip(trace.pid[queries].tolist(), trace.tid[queries].tolist())]
    out: list[int | None] = [None] * len(queries)
    by_thread: dict[tuple[int, int], list[int]] = {}
    for i, lo_hi in enumerate(span):
        by_thread.setdefault(lo_hi, []).append(i)
    parent, ends, idx = n.parent.tolist(), end.tolist(), n.idx.tolist()
    for (lo, hi), members in by_thread.items():
        if hi <= lo:
            continue
        at = np.searchsorted(ts[lo:hi], q_start[members], "right") - 1 + lo  # one search each thread
        for i, j, t1 in zip(members, at.tolist(), q_end[members].tolist()):
            while j >= lo and ends[j] < t1:
                j = parent[j]
            out[i] = idx[j] if j >= lo else None
    return out


def _op_threads(
    trace: KinetoTrace, n: Nesting
) -> tuple[np.ndarray, np.ndarray, dict[tuple[int, int], tuple[int, int]]]:
    """Op starts and ends in nesting order, and each thread's [lo, hi) range in it (cached)."""
    cached = trace.cache.get("op_threads")
    if cached is None:
        ts, end = trace.ts[n.idx], trace.ts[n.idx] + trace.dur[n.idx]
        pids, tids = trace.pid[n.idx], trace.tid[n.idx]
        starts = np.flatnonzero(np.r_[True, (pids[1:] != pids[:-1]) | (tids[1:] != tids[:-1])])
        bounds = {
            (int(pids[a]), int(tids[a])): (int(a), int(b))
            for a, b in zip(starts, np.r_[starts[1:], len(tids)])
        }
        cached = trace.cache["op_threads"] = (ts, end, bounds)
    return cached


def op_table(trace: KinetoTrace) -> list[OpRow]:
    """CPU ops (count, total, self) and GPU kernels (count, total), by self time."""
    rows: list[OpRow] = []
    ops = trace.cat == CAT["cpu_op"]
    if ops.any():
        nest = cpu_nesting(trace)
        idx, self_t = nest.idx, nest.self_us
        names = trace.name[idx]
        uniq, inverse = np.unique(names, return_inverse=True)
        count = np.bincount(inverse)
        total = np.bincount(inverse, weights=trace.dur[idx])
        selfs = np.bincount(inverse, weights=self_t)
        rows += [
            OpRow(trace.names[n], "cpu", int(c), float(t), float(s))
            for n, c, t, s in zip(uniq, count, total, selfs)
        ]
    kern = trace.of("kernel", "gpu_memcpy", "gpu_memset")
    if kern.any():
        uniq, inverse = np.unique(trace.name[kern], return_inverse=True)
        count = np.bincount(inverse)
        total = np.bincount(inverse, weights=trace.dur[kern])
        rows += [
            OpRow(trace.names[n], "cuda", int(c), float(t), float(t))
            for n, c, t in zip(uniq, count, total)
        ]
    rows.sort(key=lambda r: -r.self_us)
    return rows


def steps(trace: KinetoTrace) -> list[Span]:
    """``ProfilerStep#N`` ranges, in order: torch.profiler's per-iteration marks."""
    ua = np.flatnonzero(trace.cat == CAT["user_annotation"])
    out = []
    for i in ua:
        name = trace.names[trace.name[i]]
        if STEP_RE.match(name):
            out.append(Span(name, int(trace.tid[i]), float(trace.ts[i]), float(trace.dur[i])))
    out.sort(key=lambda s: s.ts)
    return out


def stretches(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    """Top-level ops (one thread) grouped where the gap to the next is under ``OP_GAP_US``."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    at = np.flatnonzero(np.r_[True, s[1:] - reach[:-1] >= OP_GAP_US])
    return list(zip(s[at].tolist(), np.maximum.reduceat(e, at).tolist()))


@dataclass(frozen=True)
class OutsideOps:
    """How much of the profiled wall time on the op threads no torch op covered."""

    wall_us: float
    in_ops_us: float
    ops: int

    @property
    def outside_share(self) -> float:
        return 1.0 - self.in_ops_us / self.wall_us if self.wall_us > 0 else 0.0


def time_outside_ops(trace: KinetoTrace) -> OutsideOps | None:
    """Within each step (or, with no steps, each stretch of model work on the op thread: top-
    level ops less than ``OP_GAP_US`` apart, as the agent measures live): wall not under an op."""
    ops = trace.cat == CAT["cpu_op"]
    if not ops.any():
        return None
    nest = cpu_nesting(trace)
    top = nest.idx[nest.depth == 0]
    # the thread that runs most op time is the one doing the forward
    tids, inverse = np.unique(trace.tid[top], return_inverse=True)
    main = tids[np.argmax(np.bincount(inverse, weights=trace.dur[top]))]
    top = top[trace.tid[top] == main]
    starts, ends = trace.ts[top], trace.ts[top] + trace.dur[top]
    windows = [(s.ts, s.ts + s.dur) for s in steps(trace) if s.tid == main]
    if not windows:  # every op lies inside one stretch: the ops' time is all covered
        wall = sum(b - a for a, b in stretches(starts, ends))
        return OutsideOps(wall, min(float((ends - starts).sum()), wall), int(len(top)))
    wall = covered = 0.0
    for w0, w1 in windows:
        s = np.clip(starts, w0, w1)
        e = np.clip(ends, w0, w1)
        keep = e > s
        wall += w1 - w0
        covered += float((e[keep] - s[keep]).sum())  # top-level ops do not overlap on a thread
    return OutsideOps(wall, min(covered, wall), int(len(top)))
