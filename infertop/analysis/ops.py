"""Torch ops, kernels and copies over torch-profiler windows: tables and the device flame.

Windows are merged once (``OpTotals``, incrementally by ``OpAccumulator``), then read as:
an ops table ranked by self time, a flame tree per stage (torch op → child ops → the kernels
and copies it launched, weighted in µs) and GPU summary numbers for the report.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from infertop.analysis.flame import FlameNode
from infertop.model.events import Frame, KernelStat, OpPath, OpTime, OpWindow, SyncStat
from infertop.model.rows import MemcpyRow, OpRow
from infertop.model.torch_memory import MemoryOp, MemoryStage, OpMemory

KINDS = ("compute", "memory", "communication")
DEVICE_FILE = "cuda"  # ``Frame.file`` of a kernel/copy leaf in the device flame ("" for ops)

PathKey = tuple[tuple[str, ...], str, str, "str | None"]  # names, stage, device, shapes


@dataclass(frozen=True)
class GpuWork:
    """Device work over the windows: kernel time by kind, copies, syncs, busy time."""

    kernel_time_us: dict[str, float]
    kernels: tuple[KernelStat, ...]  # merged, by total time
    memcpy: tuple[MemcpyRow, ...]
    syncs: tuple[SyncStat, ...]
    busy_us: float
    span_us: float
    max_gap_us: float

    @property
    def busy_share(self) -> float | None:
        return self.busy_us / self.span_us if self.span_us > 0 else None


@dataclass(frozen=True)
class TorchMemory:
    """The allocator's reports over the windows profiled with ``profile_memory`` (each one
    model call, ``_MemoryCall``): per stage and device summed (``peak_max`` the largest), per op
    path the bytes allocated, largest first."""

    windows: int
    stages: tuple[MemoryStage, ...]
    ops: tuple[MemoryOp, ...]
    #: (rows, device, the largest forward peak of a call of that batch), by rows
    by_rows: tuple[tuple[int, str, int], ...] = ()


class OpTotals:
    """Op windows merged: per call path, kernel, copy kind and sync. Grows with ``add``."""

    def __init__(self) -> None:
        self.windows = 0
        self.truncated = 0
        self.seconds = 0.0  # profiled wall time
        self.paths: dict[PathKey, list[float]] = {}  # [count, total_us, self_us]
        self.kernels: dict[tuple[str, str], list[float]] = {}  # [count, total, min, max]
        self.memcpy: dict[tuple[str, str], list[float]] = {}  # [count, bytes, total]
        self.syncs: dict[str, list[float]] = {}  # [count, total]
        self.busy_us = self.span_us = self.max_gap_us = 0.0
        self.timed = 0  # windows that carried op_time
        self.top_ops = 0
        self.in_ops_us = self.forward_wall_us = 0.0
        # the op thread's kernel times over the windows that carried them: on a CPU, waiting
        self.cpu_run_us = self.cpu_wait_us = 0.0
        self.cpu_timed = 0
        # profile_memory's windows (model/torch_memory.py): (stage, device) -> [calls, allocs,
        # alloc bytes, freed bytes, peak max, peak sum]; (names, stage, device) -> [allocs, bytes]
        self.memory_windows = 0
        self.memory_stages: dict[tuple[str, str], list[int]] = {}
        self.memory_ops: dict[tuple[tuple[str, ...], str, str], list[int]] = {}
        self.memory_rows: dict[tuple[int, str], int] = {}  # (rows, device) -> forward peak

    def _add_memory(self, m: OpMemory) -> None:
        self.memory_windows += 1
        for st in m.stages:
            acc = self.memory_stages.setdefault((st.stage, st.device), [0, 0, 0, 0, 0, 0])
            acc[0] += st.calls
            acc[1] += st.allocs
            acc[2] += st.alloc_bytes
            acc[3] += st.freed_bytes
            acc[4] = max(acc[4], st.peak_max)
            acc[5] += st.peak_sum
            if m.rows is not None and st.stage == "forward" and st.calls:
                key = (m.rows, st.device)
                self.memory_rows[key] = max(self.memory_rows.get(key, 0), st.peak_max)
        for o in m.ops:
            oacc = self.memory_ops.setdefault((o.names, o.stage, o.device), [0, 0])
            oacc[0] += o.allocs
            oacc[1] += o.alloc_bytes

    def add(self, w: OpWindow) -> None:
        self.windows += 1
        self.truncated += bool(w.truncated)
        self.seconds += max(0.0, w.t_end - w.t_start)
        for p in w.paths:
            acc = self.paths.setdefault((p.names, p.stage, p.device, p.shapes), [0, 0.0, 0.0])
            acc[0] += p.count
            acc[1] += p.total_us
            acc[2] += p.self_us
        for k in w.kernels:
            kacc = self.kernels.get((k.name, k.kind))
            if kacc is None:
                self.kernels[(k.name, k.kind)] = [k.count, k.total_us, k.min_us, k.max_us]
            else:
                kacc[0] += k.count
                kacc[1] += k.total_us
                kacc[2] = min(kacc[2], k.min_us)
                kacc[3] = max(kacc[3], k.max_us)
        for m in w.memcpy:
            macc = self.memcpy.setdefault((m.kind, m.host_memory), [0, 0, 0.0])
            macc[0] += m.count
            macc[1] += m.bytes
            macc[2] += m.total_us
        for y in w.syncs:
            yacc = self.syncs.setdefault(y.name, [0, 0.0])
            yacc[0] += y.count
            yacc[1] += y.total_us
        if w.op_time is not None:
            self.timed += 1
            self.top_ops += w.op_time.ops
            self.in_ops_us += w.op_time.in_ops_us
            self.forward_wall_us += w.op_time.wall_us
            if w.op_time.run_us is not None and w.op_time.wait_us is not None:
                self.cpu_timed += 1
                self.cpu_run_us += w.op_time.run_us
                self.cpu_wait_us += w.op_time.wait_us
        if w.memory is not None:
            self._add_memory(w.memory)
        if w.gpu is not None:
            self.busy_us += w.gpu.busy_us
            self.span_us += w.gpu.span_us
            self.max_gap_us = max(self.max_gap_us, w.gpu.max_gap_us)

    def absorb(self, other: OpTotals) -> None:
        """Add another ``OpTotals`` (windows merged elsewhere, e.g. folded by a bounded session)."""
        self.windows += other.windows
        self.truncated += other.truncated
        self.seconds += other.seconds
        for key, acc in other.paths.items():
            mine = self.paths.setdefault(key, [0, 0.0, 0.0])
            for i in range(3):
                mine[i] += acc[i]
        for kkey, kacc in other.kernels.items():
            k = self.kernels.get(kkey)
            if k is None:
                self.kernels[kkey] = list(kacc)
            else:
                k[0] += kacc[0]
                k[1] += kacc[1]
                k[2] = min(k[2], kacc[2])
                k[3] = max(k[3], kacc[3])
        for mkey, macc in other.memcpy.items():
            m = self.memcpy.setdefault(mkey, [0, 0, 0.0])
            for i in range(3):
                m[i] += macc[i]
        for ykey, yacc in other.syncs.items():
            y = self.syncs.setdefault(ykey, [0, 0.0])
            y[0] += yacc[0]
            y[1] += yacc[1]
        self.busy_us += other.busy_us
        self.span_us += other.span_us
        self.max_gap_us = max(self.max_gap_us, other.max_gap_us)
        self.timed += other.timed
        self.top_ops += other.top_ops
        self.in_ops_us += other.in_ops_us
        self.forward_wall_us += other.forward_wall_us
        self.cpu_timed += other.cpu_timed
        self.cpu_run_us += other.cpu_run_us
        self.cpu_wait_us += other.cpu_wait_us
        self.memory_windows += other.memory_windows
        for skey, sacc in other.memory_stages.items():
            st = self.memory_stages.setdefault(skey, [0, 0, 0, 0, 0, 0])
            for i in (0, 1, 2, 3, 5):
                st[i] += sacc[i]
            st[4] = max(st[4], sacc[4])
        for okey, oacc in other.memory_ops.items():
            o = self.memory_ops.setdefault(okey, [0, 0])
            o[0] += oacc[0]
            o[1] += oacc[1]
        for rkey, peak in other.memory_rows.items():
            self.memory_rows[rkey] = max(self.memory_rows.get(rkey, 0), peak)

    def torch_memory(self) -> TorchMemory | None:
        """What the windows profiled with ``profile_memory`` hold; None: none was."""
        if not self.memory_windows:
            return None
        stages = tuple(
            MemoryStage(stage, device, *acc)
            for (stage, device), acc in sorted(self.memory_stages.items(), key=lambda kv: -kv[1][2])
        )
        ops = tuple(
            MemoryOp(names, stage, device, *acc)
            for (names, stage, device), acc in sorted(self.memory_ops.items(), key=lambda kv: -kv[1][1])
        )
        by_rows = tuple(sorted((rows, device, peak) for (rows, device), peak in self.memory_rows.items()))
        return TorchMemory(self.memory_windows, stages, ops, by_rows)

    def op_time(self) -> OpTime | None:
        """The op thread's time summed over the windows that measured it."""
        if not self.timed:
            return None
        cpu = (self.cpu_run_us, self.cpu_wait_us) if self.cpu_timed else (None, None)
        return OpTime(self.top_ops, self.in_ops_us, self.forward_wall_us, *cpu)

    def merged_paths(self) -> list[OpPath]:
        return [
            OpPath(names, stage, device, int(c), total, self_us, shapes)
            for (names, stage, device, shapes), (c, total, self_us) in self.paths.items()
        ]


def merge_windows(windows: Iterable[OpWindow]) -> OpTotals:
    totals = OpTotals()
    for w in windows:
        totals.add(w)
    return totals


class OpAccumulator:
    """``OpTotals`` over op windows [0, n) of a session, extended while the range only grows.

    A bounded session folds its oldest windows into ``folded`` and keeps the rest in
    ``windows``, whose first element is then window number ``base`` of the session."""

    def __init__(self) -> None:
        self.totals = OpTotals()
        self.n = 0  # windows merged, counted from the session's first
        self._session = 0
        self._last: OpWindow | None = None  # window n-1 when last extended

    def upto(
        self,
        windows: list[OpWindow],
        session_id: int,
        n: int,
        folded: OpTotals | None = None,
        base: int = 0,
    ) -> OpTotals:
        """Totals over the first ``n`` windows of ``windows`` (plus ``folded``, if any)."""
        end = base + n
        stale = (
            session_id != self._session
            or end < self.n
            or self.n < base  # windows merged here were folded meanwhile: start from the fold
            or (self.n > base and windows[self.n - 1 - base] is not self._last)
        )
        if stale:
            self.totals, self.n = OpTotals(), base
            if folded is not None:
                self.totals.absorb(folded)
        for w in windows[self.n - base : n]:
            self.totals.add(w)
        self.n, self._session = end, session_id
        self._last = windows[n - 1] if n else None
        return self.totals


def ops_table(paths: Iterable[OpPath], stage_filter: str | None = None) -> list[OpRow]:
    """Rows per (op or kernel name, device, stage), by self time. An op nested in itself
    counts its total once (its outer call's total already holds the inner one)."""
    rows: dict[tuple[str, str, str], list[float]] = {}
    shapes: dict[tuple[str, str, str], dict[str, float]] = {}
    for p in paths:
        if stage_filter is not None and p.stage != stage_filter:
            continue
        name = p.names[-1]
        key = (name, p.device, p.stage)
        acc = rows.setdefault(key, [0, 0.0, 0.0])
        acc[0] += p.count
        acc[1] += 0.0 if name in p.names[:-1] else p.total_us
        acc[2] += p.self_us if p.device == "cpu" else max(p.self_us, p.total_us)
        if p.shapes:
            per = shapes.setdefault(key, {})
            per[p.shapes] = per.get(p.shapes, 0.0) + p.self_us
    out = []
    for key, (c, total, self_us) in rows.items():
        by_shape = shapes.get(key)
        top = max(by_shape.items(), key=lambda kv: kv[1])[0] if by_shape else None
        out.append(OpRow(key[0], key[1], int(c), total, self_us, key[2], top))
    out.sort(key=lambda r: (-r.self_us, r.name, r.stage))
    return out


def device_flame(paths: Iterable[OpPath], stage_filter: str | None = None) -> FlameNode:
    """Op call paths as a flame tree in whole µs: ops weigh their CPU self time, the kernels
    and copies they launched (leaves, ``Frame.file`` = ``"cuda"``) their device time."""
    root = FlameNode(None)
    for p in paths:
        if stage_filter is not None and p.stage != stage_filter:
            continue
        weight = round(p.self_us if p.device == "cpu" else max(p.self_us, p.total_us))
        if weight <= 0 or not p.names:
            continue
        node = root
        _add(node, p.stage, weight)
        last = len(p.names) - 1
        for i, name in enumerate(p.names):
            frame = Frame(name, DEVICE_FILE if p.device != "cpu" and i == last else "", 0)
            child = node.children.get(frame)
            if child is None:
                child = node.children[frame] = FlameNode(frame, node)
            _add(child, p.stage, weight)
            node = child
        node.self_count += weight
    return root


def _add(node: FlameNode, stage: str, weight: int) -> None:
    node.total += weight
    node.stages[stage] = node.stages.get(stage, 0) + weight


def gpu_work(totals: OpTotals) -> GpuWork | None:
    """None when the windows saw no device work at all (a CPU-only target)."""
    if not (totals.kernels or totals.memcpy or totals.syncs or totals.span_us):
        return None
    by_kind = dict.fromkeys(KINDS, 0.0)
    for (_name, kind), (_c, total, _lo, _hi) in totals.kernels.items():
        k = kind if kind in by_kind else "compute"
        by_kind[k] += total
    kernels = sorted(
        (KernelStat(n, k, int(c), t, lo, hi) for (n, k), (c, t, lo, hi) in totals.kernels.items()),
        key=lambda s: (-s.total_us, s.name),
    )
    memcpy = sorted(
        (MemcpyRow(k, h, int(c), int(b), t) for (k, h), (c, b, t) in totals.memcpy.items()),
        key=lambda m: (-m.total_us, m.kind, m.host_memory),
    )
    syncs = sorted(
        (SyncStat(n, int(c), t) for n, (c, t) in totals.syncs.items()),
        key=lambda s: (-s.total_us, s.name),
    )
    return GpuWork(
        by_kind, tuple(kernels), tuple(memcpy), tuple(syncs),
        totals.busy_us, totals.span_us, totals.max_gap_us,
    )  # fmt: skip
