"""Reduction of one window's events to the ``window`` message (pure functions; also fed from
Kineto trace JSON by ``infertop.record.import_kineto`` and by the tests)."""

from __future__ import annotations

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.constants import (
    MAX_ANNOTATIONS,
    MAX_KERNEL_ROWS,
    MAX_PATH_ROWS,
    OP_GAP_NS,
    STAGE_PREFIX,
)
from infertop.agent.payload.events import (
    COPY_OPS,
    CPU_KINDS,
    EV_BYTES,
    EV_DUR,
    EV_ID,
    EV_KIND,
    EV_LINK,
    EV_NAME,
    EV_SHAPES,
    EV_START,
    EV_TID,
    GPU_KINDS,
    MEMORY_KIND,
    RUNTIME_KINDS,
    SYNC_OPS,
    _us,
    is_blocking_call,
    kernel_kind,
    memcpy_kind,
)
from infertop.agent.payload.reduce_memory import _add_bytes, _stage_lookup, memory_table

# -- end --


def reduce_events(events, t_start, t_end, device_profiled=None, memory=None):
    """Aggregate one window's events into the ``window`` message fields.

    ``events`` is an iterable of event tuples (see ``events.py``); ``t_start``/``t_end`` the
    window in unix seconds. ``device_profiled`` says whether device activity was being recorded
    (decides whether ``aten::item`` counts as a device sync); None: whenever any device event is
    present. Returns a dict with ``paths``, ``kernels``, ``memcpy``, ``syncs``, ``annotations``,
    ``gpu``, ``op_time``, and ``memory`` (``memory_table``) where ``memory`` is true (the window
    had ``profile_memory``) or, with ``memory`` None, where there are memory events.

    The phases, in order: sort the events by kind; the device syncs; per thread, nest the CPU
    ops by time and place the runtime calls under them; mark the ops that waited on the device;
    aggregate the ops by call path; hang the device work under the ops that launched it; the
    rows of the message.
    """
    cpu_by_tid, gpu, runtime, sync_events = _events_by_kind(events)
    if device_profiled is None:
        device_profiled = bool(gpu or runtime or sync_events)
    sync_agg = _sync_table(runtime, sync_events)
    intern, path_of = _path_trie()
    ops = _nest_ops(cpu_by_tid, intern, sync_item=device_profiled)
    _spread_syncs(ops)
    agg = _op_table(ops)
    kern, copies, intervals = _device_tables(gpu, ops, intern, agg)
    fields = _rows(path_of, agg, kern, copies, sync_agg, ops.annotations)
    fields["gpu"] = gpu_busy(intervals, t_start, t_end) if intervals else None
    fields["op_time"] = op_time(ops.tops_by_tid, stops=not device_profiled)
    if memory or (memory is None and ops.memory):
        fields["memory"] = memory_table(ops, path_of)
    return fields


def _events_by_kind(events):
    """(CPU ops, annotations and runtime calls per thread, device work, runtime calls, CUDA
    sync events); events of other kinds are dropped."""
    cpu_by_tid = {}
    gpu = []
    runtime = []
    sync_events = []
    for ev in events:
        kind = ev[EV_KIND]
        if kind in CPU_KINDS or kind in RUNTIME_KINDS or kind == MEMORY_KIND:
            lst = cpu_by_tid.get(ev[EV_TID])
            if lst is None:
                lst = cpu_by_tid[ev[EV_TID]] = []
            lst.append(ev)
            if kind in RUNTIME_KINDS:
                runtime.append(ev)
        elif kind in GPU_KINDS:
            gpu.append(ev)
        elif kind == "cuda_sync":
            sync_events.append(ev)
    return cpu_by_tid, gpu, runtime, sync_events


def _sync_table(runtime, sync_events):
    """Device syncs, {name: [count, total ns]}: blocking runtime calls and CUDA sync events."""
    sync_agg = {}
    for ev in runtime:
        name = ev[EV_NAME]
        if is_blocking_call(name):
            a = sync_agg.get(name)
            if a is None:
                sync_agg[name] = [1, ev[EV_DUR]]
            else:
                a[0] += 1
                a[1] += ev[EV_DUR]
    for ev in sync_events:
        name = ev[EV_NAME]
        a = sync_agg.get(name)
        if a is None:
            sync_agg[name] = [1, ev[EV_DUR]]
        else:
            a[0] += 1
            a[1] += ev[EV_DUR]
    return sync_agg


def _path_trie():
    """Call paths interned as the nodes of a trie (node 0: the root). Returns ``intern(parent,
    name)`` -> node and ``path_of(node)`` -> the names from the root down to the node."""
    node_ids = {}
    node_parent = [-1]
    node_name = [""]

    def intern(parent, name):
        key = (parent, name)
        node = node_ids.get(key)
        if node is None:
            node = node_ids[key] = len(node_name)
            node_parent.append(parent)
            node_name.append(name)
        return node

    names_cache = {}

    def path_of(node):
        names = names_cache.get(node)
        if names is None:
            rev = []
            n = node
            while n > 0:
                rev.append(node_name[n])
                n = node_parent[n]
            rev.reverse()
            names = names_cache[node] = rev
        return names

    return intern, path_of


class _OpRecords:
    """A window's CPU ops nested by time: one record per op, in parallel lists (an op's index is
    its record), and what the nesting found on the way."""

    def __init__(self):
        self.node = []  # its call path's trie node
        self.name = []
        self.parent = []  # the record of the op around it, -1 at the top
        self.dur = []
        self.child = []  # ns spent in the ops under it
        self.stage = []  # of the innermost annotation around it, or None
        self.shapes = []
        self.sync = []  # it waited on the device
        self.by_id = {}  # the op's correlation id -> record
        self.runtime_op = {}  # a runtime call's correlation id -> record of the op around it
        self.tops_by_tid = {}  # tid -> [(start_ns, end_ns, name)] of its top-level ops
        self.top_records = {}  # tid -> the records of its top-level ops, in time order
        self.annotations = []  # (start_ns, name, tid, end_ns)
        # memory events: (tid, start_ns, bytes, device, record of the op around it or -1,
        # stage of the annotation around it or None), in time order per thread
        self.memory = []
        self.stage_calls = []  # (stage, {device: [bytes now, peak]}) of each stage annotation


def _nest_ops(cpu_by_tid, intern, sync_item):
    """Per thread, nest the ops by time (an op lies under the op around it); runtime calls go
    under the op around them, else under the op whose id they carry. ``sync_item``: ``SYNC_OPS``
    wait on the device."""
    ops = _OpRecords()
    rec_node = ops.node
    rec_name = ops.name
    rec_parent = ops.parent
    rec_dur = ops.dur
    rec_child = ops.child
    rec_stage = ops.stage
    rec_shapes = ops.shapes
    rec_sync = ops.sync
    op_by_id = ops.by_id
    runtime_op = ops.runtime_op
    tops_by_tid = ops.tops_by_tid
    annotations = ops.annotations
    memory = ops.memory
    unplaced = []  # runtime calls outside any op on their thread
    for tid, lst in cpu_by_tid.items():
        tops = tops_by_tid[tid] = []
        top_records = ops.top_records[tid] = []
        lst.sort(key=lambda e: (e[EV_START], -e[EV_DUR]))
        op_stack = []  # (end_ns, record index)
        ann_stack = []  # (end_ns, stage or None, {device: [bytes now, peak]} of a stage call)
        for ev in lst:
            start = ev[EV_START]
            end = start + ev[EV_DUR]
            while op_stack and op_stack[-1][0] <= start:
                op_stack.pop()
            while ann_stack and ann_stack[-1][0] <= start:
                ann_stack.pop()
            name = ev[EV_NAME]
            kind = ev[EV_KIND]
            if kind == MEMORY_KIND:
                nbytes = ev[EV_BYTES]
                device = ev[EV_SHAPES]
                memory.append(
                    (tid, start, nbytes, device, op_stack[-1][1] if op_stack else -1,
                     ann_stack[-1][1] if ann_stack else None)
                )  # fmt: skip
                for entry in ann_stack:  # every stage call this allocation is inside
                    acc = entry[2]
                    if acc is not None:
                        _add_bytes(acc, device, nbytes)
                continue
            if kind in RUNTIME_KINDS:
                op = op_stack[-1][1] if op_stack else None
                if op is None:
                    unplaced.append(ev)
                else:
                    runtime_op[ev[EV_ID]] = op
                    if is_blocking_call(name):
                        rec_sync[op] = True
                continue
            if kind == "user_annotation":
                acc = None
                if name.startswith(STAGE_PREFIX) and len(name) > len(STAGE_PREFIX):
                    stage = name[len(STAGE_PREFIX) :]
                    acc = {}
                    ops.stage_calls.append((stage, acc))
                else:
                    stage = ann_stack[-1][1] if ann_stack else None
                ann_stack.append((end, stage, acc))
                annotations.append((start, name, tid, end))
                continue
            if op_stack:
                parent = op_stack[-1][1]
                parent_node = rec_node[parent]
                rec_child[parent] += ev[EV_DUR]
            else:
                parent = -1
                tops.append((start, end, name))
                top_records.append(len(rec_node))
                parent_node = 0
            idx = len(rec_node)
            rec_node.append(intern(parent_node, name))
            rec_name.append(name)
            rec_parent.append(parent)
            rec_dur.append(ev[EV_DUR])
            rec_child.append(0)
            rec_stage.append(ann_stack[-1][1] if ann_stack else None)
            rec_shapes.append(ev[EV_SHAPES])
            ident = ev[EV_ID]
            rec_sync.append(sync_item and name in SYNC_OPS)
            if ident:
                op_by_id[ident] = idx
            op_stack.append((end, idx))

    for ev in unplaced:  # fall back on the op id the runtime call carries
        op = op_by_id.get(ev[EV_LINK]) if ev[EV_LINK] else None
        runtime_op[ev[EV_ID]] = op
        if op is not None and is_blocking_call(ev[EV_NAME]):
            rec_sync[op] = True
    return ops


def _spread_syncs(ops):
    """An op that waited on the device makes the copy-like ops around it wait too."""
    rec_sync = ops.sync
    rec_parent = ops.parent
    rec_name = ops.name
    for idx in range(len(rec_sync)):
        if rec_sync[idx]:
            p = rec_parent[idx]
            while p >= 0 and not rec_sync[p] and rec_name[p] in COPY_OPS:
                rec_sync[p] = True
                p = rec_parent[p]


def _op_table(ops):
    """{(node, stage, "cpu", shapes): [count, total ns, self ns]} of the CPU ops."""
    agg = {}
    rec_node = ops.node
    rec_dur = ops.dur
    rec_child = ops.child
    rec_shapes = ops.shapes
    stage_of = _stage_lookup(ops)
    for idx in range(len(rec_node)):
        dur = rec_dur[idx]
        self_ns = dur - rec_child[idx]
        if self_ns < 0:
            self_ns = 0
        key = (rec_node[idx], stage_of(idx), "cpu", rec_shapes[idx])
        a = agg.get(key)
        if a is None:
            agg[key] = [1, dur, self_ns]
        else:
            a[0] += 1
            a[1] += dur
            a[2] += self_ns
    return agg


def _device_tables(gpu, ops, intern, agg):
    """Device work: each event a leaf under the op that launched it (added to ``agg``), the
    kernel table, the copies and the busy intervals. Returns (kernels, copies, intervals)."""
    kern = {}
    copies = {}
    intervals = []
    runtime_op = ops.runtime_op
    op_by_id = ops.by_id
    rec_node = ops.node
    stage_of = _stage_lookup(ops)
    for ev in gpu:
        name = ev[EV_NAME]
        dur = ev[EV_DUR]
        op = runtime_op.get(ev[EV_ID]) if ev[EV_ID] else None
        if op is None and ev[EV_LINK]:
            op = op_by_id.get(ev[EV_LINK])
        if op is not None:
            node = intern(rec_node[op], name)
            stage = stage_of(op)
        else:
            node = intern(0, name)
            stage = "forward"
        key = (node, stage, "cuda", None)
        a = agg.get(key)
        if a is None:
            agg[key] = [1, dur, dur]
        else:
            a[0] += 1
            a[1] += dur
            a[2] += dur
        k = kern.get(name)
        if k is None:
            kern[name] = [kernel_kind(ev[EV_KIND], name), 1, dur, dur, dur]
        else:
            k[1] += 1
            k[2] += dur
            if dur < k[3]:
                k[3] = dur
            if dur > k[4]:
                k[4] = dur
        if ev[EV_KIND] != "kernel":
            ckind, host = memcpy_kind(name)
            if ckind is None:
                if ev[EV_KIND] == "gpu_memset":
                    ckind, host = "memset", "unknown"
                else:
                    ckind, host = "DtoD", "unknown"
            c = copies.get((ckind, host))
            if c is None:
                copies[(ckind, host)] = [1, ev[EV_BYTES] or 0, dur]
            else:
                c[0] += 1
                c[1] += ev[EV_BYTES] or 0
                c[2] += dur
        intervals.append((ev[EV_START], ev[EV_START] + dur))
    return kern, copies, intervals


def _rows(path_of, agg, kern, copies, sync_agg, annotations):
    """The message's ``paths``, ``kernels``, ``memcpy``, ``syncs`` and ``annotations`` rows,
    largest first, cut at their limits (``annotations`` is sorted in place)."""
    rows = sorted(agg.items(), key=lambda kv: -kv[1][1])[:MAX_PATH_ROWS]
    paths = [
        [path_of(node), stage, device, a[0], _us(a[1]), _us(a[2]), shapes]
        for (node, stage, device, shapes), a in rows
    ]
    kernels = [
        [name, k[0], k[1], _us(k[2]), _us(k[3]), _us(k[4])]
        for name, k in sorted(kern.items(), key=lambda kv: -kv[1][2])[:MAX_KERNEL_ROWS]
    ]
    memcpy = [
        [ckind, host, c[0], int(c[1]), _us(c[2])]
        for (ckind, host), c in sorted(copies.items(), key=lambda kv: -kv[1][2])
    ]
    syncs = [
        [name, a[0], _us(a[1])] for name, a in sorted(sync_agg.items(), key=lambda kv: -kv[1][1])
    ]
    annotations.sort()
    annots = [
        [name, tid, start / 1e9, end / 1e9]
        for start, name, tid, end in annotations[:MAX_ANNOTATIONS]
    ]
    return {
        "paths": paths,
        "kernels": kernels,
        "memcpy": memcpy,
        "syncs": syncs,
        "annotations": annots,
    }


def op_time(tops_by_tid, gap_ns=OP_GAP_NS, stops=True):
    """Time inside and outside torch ops on the thread that runs the most op time: its
    top-level ops (start_ns, end_ns, name), grouped into stretches of model work (ops less
    than ``gap_ns`` apart). ``wall_us`` is the stretches' length, ``in_ops_us`` the part under
    an op, so the rest is Python and dispatch between the ops (python-overhead, tiny-ops).

    A thread stopped for a while (a sampler's ptrace stop, preemption on a busy host) makes
    either a long gap, which ends a stretch, or a long op: to keep the two alike, an op that
    lasts ``gap_ns`` or more and over 20 times its name's median counts at that median, and
    the excess leaves the stretch too. Not for copies and syncs (``COPY_OPS``: they wait for
    the device or for memory, and their waits vary by design), and not at all with ``stops``
    false: where a device is profiled a long CPU op is a wait for it (a full launch queue, an
    allocation), and taking it out would make a GPU-bound loop look like Python overhead.
    None without CPU ops."""
    best = None
    best_in = -1
    for tid, tops in tops_by_tid.items():
        inside = sum(t[1] - t[0] for t in tops)
        if tops and inside > best_in:
            best, best_in = tid, inside
    if best is None:
        return None
    tops = tops_by_tid[best]
    durations = {}
    for s, e, name in tops:
        durations.setdefault(name, []).append(e - s)
    typical = {}
    for name, ds in durations.items():
        if stops and name not in COPY_OPS and max(ds) >= gap_ns:  # names with a long call
            ds.sort()
            typical[name] = ds[len(ds) // 2]
    stopped = 0
    for s, e, name in tops:
        med = typical.get(name)
        if med is not None and e - s >= gap_ns and e - s > 20 * med:
            stopped += e - s - med
    wall = 0
    cur_s, cur_e = tops[0][0], tops[0][1]
    for s, e, _name in tops[1:]:
        if s - cur_e >= gap_ns:
            wall += cur_e - cur_s
            cur_s = s
        if e > cur_e:
            cur_e = e
    wall += cur_e - cur_s
    in_ops = best_in - stopped
    wall = max(wall - stopped, in_ops)
    return {"tid": best, "ops": len(tops), "in_ops_us": _us(in_ops), "wall_us": _us(wall)}


def op_thread_cpu(op, cpu_start, cpu_end):
    """Add to ``op`` (an ``op_time``, or None) what its thread did from the window's start to
    its stop by the kernel's count (``_threads_cpu`` readings at both ends): ``run_us`` on a CPU,
    ``wait_us`` on a run queue waiting for one. A thread preempted inside an op has the wait in
    that op's time; a copy's wait is never taken out (``op_time``), so the copy-heavy rule says
    how long the thread waited. Left as it is where either reading lacks the thread."""
    if op is None:
        return
    a, b = cpu_start.get(op["tid"]), cpu_end.get(op["tid"])
    if a is None or b is None or b[0] < a[0] or b[1] < a[1]:
        return
    op["run_us"] = _us(b[0] - a[0])
    op["wait_us"] = _us(b[1] - a[1])


def gpu_busy(intervals, t_start, t_end):
    """Union of device activity: busy µs, the window's span µs, and the longest idle gap µs
    (counting the stretches before the first and after the last activity in the window)."""
    intervals = sorted(intervals)
    lo = int(t_start * 1e9)
    hi = int(t_end * 1e9)
    if intervals[0][0] < lo:
        lo = intervals[0][0]
    busy = 0
    max_gap = 0
    cur_s, cur_e = intervals[0]
    if cur_s - lo > max_gap:
        max_gap = cur_s - lo
    for s, e in intervals[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            if s - cur_e > max_gap:
                max_gap = s - cur_e
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    busy += cur_e - cur_s
    if cur_e > hi:
        hi = cur_e
    if hi - cur_e > max_gap:
        max_gap = hi - cur_e
    return {"busy_us": _us(busy), "span_us": _us(hi - lo), "max_gap_us": _us(max_gap)}
