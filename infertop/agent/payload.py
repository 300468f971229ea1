"""The in-process agent: runs inside the target and serves ``docs/agent-protocol.md``.

This file is sent into target processes as source text (``payload_source()``), after the source
of ``protocol.py``, and executed there in a fresh namespace. So it must stay self-contained: the
stdlib and the target's own ``torch`` only (imported from ``sys.modules``, never imported by us),
no numpy, nothing from ``infertop`` at module level, and Python 3.8+ syntax. Imported as
``infertop.agent.payload`` (tests, ``payload_source``) it borrows the protocol names from
``infertop.agent.protocol`` instead.

What the agent does, on one daemon thread named ``infertop-agent``:

- listens on ``/tmp/infertop-<uid>/agent-<pid>.sock`` (dir 0700, socket 0600), one client at a
  time, peer uid checked with ``SO_PEERCRED``;
- while started: duty-cycled ``torch.profiler`` windows over all threads, reduced in place to
  op paths / kernels / copies / syncs / annotations (``reduce_events``, a pure function);
  ``infertop.stage`` spans and, on Python >= 3.12, ``sys.monitoring`` timings of functions named
  by ``stage_functions``; CUDA caching-allocator statistics each second;
- on ``detach`` or disconnect: stops everything within a second; an injected agent then removes
  its socket, its registry entry and its thread, an armed one waits for the next client.
"""

from __future__ import annotations

import collections
import fnmatch
import os
import re
import select
import socket
import sys
import threading
import time

if "send_msg" not in globals():  # imported as a module, not exec'd after protocol.py's source
    from infertop.agent.protocol import (  # noqa: F401
        ConnectionClosed,
        FrameDecoder,
        ProtocolError,
        UnsafeSocketDir,
        encode_msg,
        ensure_socket_dir,
        is_stale_socket,
        peer_allowed,
        peer_uid,
        socket_path,
        sweep_stale_sockets,
    )

AGENT_NAME = "infertop-agent/1"
REGISTRY_KEY = "_infertop_agent"
THREAD_NAME = "infertop-agent"
STAGE_PREFIX = "infertop:"

#: Defaults chosen by measurement (see docs/agent-protocol.md, "Cost"): a 0.25 s window every
#: 10 s and at most 20k events per window keep a busy CPU target's throughput loss under 3 %.
DEFAULT_CONFIG = {
    "window_s": 0.25,
    "period_s": 10.0,
    "record_shapes": False,
    "max_events": 20000,
    "stage_functions": [],
}
#: Never stop a window sooner than this after its start: with profile_all_threads, torch 2.13
#: corrupted the heap / segfaulted within a few hundred windows stopped 0-5 ms after their
#: start while other threads ran ops (0 crashes in 1,200 windows of >= 50 ms).
MIN_WINDOW_S = 0.1
#: The share of the target's time windows may cost: when one window's measured cost (its
#: profiling slowdown plus the stop/read/reduce time, during which the target's Python threads
#: mostly wait for the GIL) exceeds COST_BUDGET * period_s, the next window waits longer.
COST_BUDGET = 0.015
WINDOW_SLOWDOWN = 0.3  # assumed slowdown of the target while a window records
LIMITS = {
    "window_s": (MIN_WINDOW_S, 10.0),
    "period_s": (0.1, 3600.0),
    "max_events": (1000, 100000),  # a window's stop cost grows with its events (~5 µs each)
}
#: The first window after start also measures the event rate (a window's cost grows with its
#: event count, so later windows are shortened to stay under max_events).
PROBE_WINDOW_S = MIN_WINDOW_S
MAX_PATH_ROWS = 4000
MAX_ANNOTATIONS = 2000
MAX_KERNEL_ROWS = 2000
MAX_SPANS_BUFFERED = 50000
#: op_time: top-level ops on a thread less than this apart belong to one stretch of model work
#: (the gap is Python and dispatch); a longer gap is another stage or waiting (measured on the
#: samples: Python between ops is 1-60 us, tokenizer / JSON / queue gaps are milliseconds)
OP_GAP_NS = 1000000
SPAN_FLUSH_S = 0.5
MAX_STAGE_FUNCTIONS = 1000  # functions the stage rules may have timed (sys.monitoring)
ALLOCATOR_EVERY_S = 1.0
SEND_TIMEOUT_S = 5.0
KINETO_QUIET_LEVEL = 6  # above every libkineto level (VERBOSE 0 ... USDT 5)
C10_QUIET_LEVEL = 2  # c10's LOG threshold while a window stops: errors only (INFO 0, WARNING 1)
#: Between removing the profiler's op callbacks and finalising the window. torch 2.13 with
#: profile_all_threads: a thread inside an op while the profiler finalises may write to freed
#: per-thread queues (SIGSEGV in ThreadLocalSubqueue::begin_op, seen under load, about one per
#: 1,700 windows of 0.3 s); with the callbacks removed first and this pause, none in 3,900
#: (tests/agent/stress_profiler_stop.py, docs/agent-protocol.md).
STOP_GRACE_S = 0.03

# ---------------------------------------------------------------------------------------------
# Reduction of profiler events (pure functions; also fed from Kineto trace JSON in the tests)
#
# One event is a tuple:
#   (kind, name, tid, start_ns, dur_ns, ident, link, nbytes, shapes)
# kind    Kineto activity type: cpu_op, user_annotation, kernel, gpu_memcpy, gpu_memset,
#         cuda_runtime, cuda_driver, cuda_sync (others are ignored)
# tid     OS thread id for CPU events, stream for GPU events
# start_ns unix time in ns; dur_ns duration in ns
# ident   the event's own id: a CPU op's correlation id ("External id" in trace files); for
#         runtime calls and GPU work the CUDA correlation id that pairs a launch with its work
# link    for runtime calls and GPU events: the ident of the CPU op that launched them (0: none);
#         only a fallback: runtime calls are placed under ops by time on their thread, GPU work
#         under the op of the runtime call with the same correlation id
# nbytes  bytes moved by a memcpy / set by a memset (0 otherwise)
# shapes  short input-shape string of a CPU op (None unless record_shapes)

EV_KIND, EV_NAME, EV_TID, EV_START, EV_DUR, EV_ID, EV_LINK, EV_BYTES, EV_SHAPES = range(9)

CPU_KINDS = frozenset(("cpu_op", "user_annotation"))
GPU_KINDS = frozenset(("kernel", "gpu_memcpy", "gpu_memset"))
RUNTIME_KINDS = frozenset(("cuda_runtime", "cuda_driver"))
SYNC_OPS = frozenset(("aten::item", "aten::_local_scalar_dense"))
COPY_OPS = frozenset(
    (
        "aten::to",
        "aten::_to_copy",
        "aten::copy_",
        "aten::cpu",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::tolist",
        "aten::contiguous",
        "aten::clone",
        "aten::nonzero",
    )
)
BLOCKING_CALLS = frozenset(
    (
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cudaMemset",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
    )
)
_MEMCPY_RE = re.compile(r"^Memcpy ([A-Za-z])to([A-Za-z])(?: \(([A-Za-z]+) -> ([A-Za-z]+)\))?")
_MEMSET_RE = re.compile(r"^Memset(?: \(([A-Za-z]+)\))?")
_BYTES_RE = re.compile(r'"bytes"\s*:\s*(\d+)')


def is_blocking_call(name: str) -> bool:
    """A runtime/driver call that blocks the host until the device catches up."""
    return name in BLOCKING_CALLS or name.endswith("Synchronize")


def kernel_kind(kind: str, name: str) -> str:
    if kind != "kernel":
        return "memory"
    return "communication" if name.lower().startswith("nccl") else "compute"


def memcpy_kind(name: str):
    """(kind, host_memory) of a gpu_memcpy / gpu_memset event name, e.g.
    ``Memcpy HtoD (Pageable -> Device)`` -> ("HtoD", "pageable")."""
    m = _MEMCPY_RE.match(name)
    if m is not None:
        src, dst = m.group(1).upper(), m.group(2).upper()
        src_mem, dst_mem = (m.group(3) or "").lower(), (m.group(4) or "").lower()
        src_h, dst_h = src == "H", dst == "H"
        kind = ("H" if src_h else "D") + "to" + ("H" if dst_h else "D")
        if src_h and dst_h:
            mems = (src_mem, dst_mem)
            host = "pageable" if "pageable" in mems else ("pinned" if "pinned" in mems else "unknown")
        elif src_h:
            host = src_mem
        elif dst_h:
            host = dst_mem
        else:
            host = "device"
        if host not in ("pageable", "pinned", "device"):
            host = "unknown"
        return kind, host
    m = _MEMSET_RE.match(name)
    if m is not None:
        where = (m.group(1) or "").lower()
        return "memset", where if where in ("device", "pageable", "pinned") else "unknown"
    return None, None


def _us(ns) -> float:
    return round(ns / 1000.0, 3)


def reduce_events(events, t_start, t_end, device_profiled=None):
    """Aggregate one window's events into the ``window`` message fields.

    ``events`` is an iterable of event tuples (see above); ``t_start``/``t_end`` the window in
    unix seconds. ``device_profiled`` says whether device activity was being recorded (decides
    whether ``aten::item`` counts as a device sync); None: whenever any device event is present.
    Returns a dict with ``paths``, ``kernels``, ``memcpy``, ``syncs``, ``annotations``, ``gpu``.
    """
    cpu_by_tid = {}  # CPU ops, annotations and runtime calls, per thread
    gpu = []
    runtime = []
    sync_events = []
    for ev in events:
        kind = ev[EV_KIND]
        if kind in CPU_KINDS or kind in RUNTIME_KINDS:
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
    if device_profiled is None:
        device_profiled = bool(gpu or runtime or sync_events)

    # device syncs: blocking runtime calls and CUDA sync events
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

    # call paths: per thread, nest ops by time; a path is interned as a node in a trie
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

    rec_node = []
    rec_name = []
    rec_parent = []
    rec_dur = []
    rec_child = []
    rec_stage = []
    rec_shapes = []
    rec_sync = []
    op_by_id = {}
    runtime_op = {}  # correlation id -> index of the op around the runtime call (or None)
    unplaced = []  # runtime calls outside any op on their thread
    annotations = []
    sync_item = device_profiled
    tops_by_tid = {}  # tid -> [(start_ns, end_ns)] of its top-level ops, in start order
    for tid, lst in cpu_by_tid.items():
        tops = tops_by_tid[tid] = []
        lst.sort(key=lambda e: (e[EV_START], -e[EV_DUR]))
        op_stack = []  # (end_ns, record index)
        ann_stack = []  # (end_ns, stage or None)
        for ev in lst:
            start = ev[EV_START]
            end = start + ev[EV_DUR]
            while op_stack and op_stack[-1][0] <= start:
                op_stack.pop()
            while ann_stack and ann_stack[-1][0] <= start:
                ann_stack.pop()
            name = ev[EV_NAME]
            kind = ev[EV_KIND]
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
                if name.startswith(STAGE_PREFIX) and len(name) > len(STAGE_PREFIX):
                    stage = name[len(STAGE_PREFIX) :]
                else:
                    stage = ann_stack[-1][1] if ann_stack else None
                ann_stack.append((end, stage))
                annotations.append((start, name, tid, end))
                continue
            if op_stack:
                parent = op_stack[-1][1]
                parent_node = rec_node[parent]
                rec_child[parent] += ev[EV_DUR]
            else:
                parent = -1
                tops.append((start, end, name))
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

    # an op that waited on the device makes the copy-like ops around it wait too
    for idx in range(len(rec_node)):
        if rec_sync[idx]:
            p = rec_parent[idx]
            while p >= 0 and not rec_sync[p] and rec_name[p] in COPY_OPS:
                rec_sync[p] = True
                p = rec_parent[p]

    def stage_of(idx):
        stage = rec_stage[idx]
        if stage is not None:
            return stage
        return "sync" if rec_sync[idx] else "forward"

    agg = {}
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

    # device work: leaves under the op that launched it; kernel table; copies; busy time
    kern = {}
    copies = {}
    intervals = []
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
                ckind, host = ("memset", "unknown") if ev[EV_KIND] == "gpu_memset" else ("DtoD", "unknown")
            c = copies.get((ckind, host))
            if c is None:
                copies[(ckind, host)] = [1, ev[EV_BYTES] or 0, dur]
            else:
                c[0] += 1
                c[1] += ev[EV_BYTES] or 0
                c[2] += dur
        intervals.append((ev[EV_START], ev[EV_START] + dur))

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
    syncs = [[name, a[0], _us(a[1])] for name, a in sorted(sync_agg.items(), key=lambda kv: -kv[1][1])]
    annotations.sort()
    annots = [
        [name, tid, start / 1e9, end / 1e9] for start, name, tid, end in annotations[:MAX_ANNOTATIONS]
    ]
    return {
        "paths": paths,
        "kernels": kernels,
        "memcpy": memcpy,
        "syncs": syncs,
        "annotations": annots,
        "gpu": gpu_busy(intervals, t_start, t_end) if intervals else None,
        "op_time": op_time(tops_by_tid, stops=not device_profiled),
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


def format_shapes(shapes, dtypes):
    """``float[8, 64], long[8]``: the tensor inputs of an op, at most ~96 characters."""
    parts = []
    try:
        for i, shape in enumerate(shapes):
            if not shape:
                continue
            dtype = dtypes[i] if i < len(dtypes) else ""
            parts.append("%s%s" % (dtype, list(shape)))
    except Exception:
        return None
    if not parts:
        return None
    text = ", ".join(parts)
    return text if len(text) <= 96 else text[:93] + "..."


def kineto_events(results_events, limit, record_shapes, end_ns=None):
    """Event tuples from ``prof.kineto_results.events()`` (``_KinetoEvent`` objects).

    Only the first ``limit`` events are read. Uses ``activity_type()`` where this torch has it,
    else infers the kind from the device type and the name. ``end_ns``: when the profiler
    stopped; an op still running then has no real end (torch reports a wrapped-around
    duration), so durations are clamped to it.
    """
    out = []
    append = out.append
    evs = results_events[:limit] if len(results_events) > limit else results_events
    if not len(evs):
        return out
    cls = type(evs[0])
    has_activity = hasattr(cls, "activity_type")
    has_resource = hasattr(cls, "device_resource_id")
    ns = hasattr(cls, "start_ns")
    for e in evs:
        kind = e.activity_type() if has_activity else _guess_kind(e)
        cpu = kind in CPU_KINDS
        if not cpu and kind not in GPU_KINDS and kind not in RUNTIME_KINDS and kind != "cuda_sync":
            continue
        if ns:
            start = e.start_ns()
            dur = e.duration_ns()
        else:
            start = e.start_us() * 1000
            dur = e.duration_us() * 1000
        if end_ns is not None and (dur < 0 or start + dur > end_ns):
            dur = end_ns - start if end_ns > start else 0
        if cpu:
            shapes = None
            if record_shapes and kind == "cpu_op":
                shapes = format_shapes(e.shapes(), e.dtypes())
            tid = e.device_resource_id() if has_resource else e.start_thread_id()
            append((kind, e.name(), tid, start, dur, e.correlation_id(), 0, 0, shapes))
        else:
            nbytes = 0
            if kind == "gpu_memcpy" or kind == "gpu_memset":
                try:
                    m = _BYTES_RE.search(e.metadata_json() or "")
                    nbytes = int(m.group(1)) if m else 0
                except Exception:
                    nbytes = 0
            stream = e.device_resource_id() if has_resource else 0
            append((kind, e.name(), stream, start, dur, e.correlation_id(), e.linked_correlation_id(), nbytes, None))
    return out


def _guess_kind(e):
    try:
        device = str(e.device_type())
    except Exception:
        device = "CPU"
    name = e.name()
    if device.endswith("CPU"):
        try:
            if e.is_user_annotation():
                return "user_annotation"
        except Exception:
            pass
        try:
            if e.linked_correlation_id() > 0:
                return "cuda_runtime"
        except Exception:
            pass
        return "cpu_op"
    if name.startswith("Memcpy"):
        return "gpu_memcpy"
    if name.startswith("Memset"):
        return "gpu_memset"
    return "kernel"


# ---------------------------------------------------------------------------------------------
# Keeping the target's stderr clean


class _KinetoLog:
    """libkineto's log threshold (``libkineto::Logger::severityLevel_``) via ctypes.

    libkineto prints ``USDT: ... profiler_start/stop`` (and, before its first use, may print
    ``STAGE``/``INFO`` lines) to stderr whatever torch's logging settings say; the threshold is
    read at every log call, so raising it around our windows silences exactly our lines.
    """

    SYMBOL = "_ZN9libkineto6Logger14severityLevel_E"

    def __init__(self):
        self.level = None  # a ctypes.c_int in libtorch, or None
        try:
            import ctypes

            paths = []
            with open("/proc/self/maps", "r") as fh:
                for line in fh:
                    parts = line.split(None, 5)
                    if len(parts) == 6:
                        path = parts[5].strip()
                        if "torch" in path and ".so" in path and path not in paths:
                            paths.append(path)
            paths.sort(key=lambda p: "torch_cpu" not in p)
            mode = getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1)
            for path in paths:
                try:
                    lib = ctypes.CDLL(path, mode=mode)
                    self.level = ctypes.c_int.in_dll(lib, self.SYMBOL)
                    break
                except (OSError, ValueError):
                    continue
        except Exception:
            self.level = None

        self.c10 = None  # c10's LOG threshold (FLAGS_caffe2_log_level in libc10), or None
        try:
            import ctypes

            lib = ctypes.CDLL(
                "libc10.so", mode=getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1)
            )
            self.c10 = ctypes.c_int.in_dll(lib, "FLAGS_caffe2_log_level")
        except Exception:
            self.c10 = None

    def quiet_c10(self):
        """Raise c10's LOG threshold to errors (torch warns on stderr when collection is toggled
        and when an op outlives a stopped profiler); returns the value for ``restore_c10``."""
        if self.c10 is not None and self.c10.value >= C10_QUIET_LEVEL:
            return None  # already at least that quiet: leave it
        return _raise_threshold(self.c10, C10_QUIET_LEVEL)

    def restore_c10(self, old):
        _restore_threshold(self.c10, C10_QUIET_LEVEL, old)

    def initialised(self):
        """False while libkineto has never been initialised (threshold still 0/VERBOSE)."""
        return self.level is not None and self.level.value != 0

    def quiet(self):
        """Raise the threshold; returns the value to hand back to ``restore``."""
        return _raise_threshold(self.level, KINETO_QUIET_LEVEL)

    def restore(self, old):
        _restore_threshold(self.level, KINETO_QUIET_LEVEL, old)


def _raise_threshold(cint, level):
    """Set a C log threshold (a ctypes int, or None when not found); returns the old value."""
    if cint is None:
        return None
    old = cint.value
    cint.value = level
    return old


def _restore_threshold(cint, level, old):
    """Put back ``old`` unless someone else changed the threshold meanwhile."""
    if cint is not None and old is not None and cint.value == level:
        cint.value = old


_KINETO_LINE = re.compile(
    rb"^(?:(?:ERROR|WARNING|INFO|STAGE|USDT|VERBOSE):\d{4}-\d\d-\d\d |"
    rb"ERROR: External init callback|  (?:Log file|Trace start time|Trace duration|Warmup "
    rb"duration|Max GPU buffer size|Enabled activities):)"
)


def _run_capturing_stderr(fn):
    """Run ``fn`` with fd 2 sent to a pipe; forward every captured line that is not libkineto's.

    Used only around the first initialisation of libkineto (which may print a line with a raw
    fprintf that no log level controls). Lines of the target written meanwhile are delayed by
    the few milliseconds this takes, not lost.
    """
    try:
        r, w = os.pipe()
    except OSError:
        return fn()
    if r <= 2 or w <= 2:  # the target runs with std fds closed: nothing to protect
        os.close(r)
        os.close(w)
        return fn()
    saved = -1
    try:
        saved = os.dup(2)
        os.dup2(w, 2)
    except OSError:
        os.close(r)
        os.close(w)
        if saved >= 0:
            os.close(saved)
        return fn()
    os.close(w)
    try:
        return fn()
    finally:
        try:
            sys.stderr.flush()
        except Exception:
            pass
        os.dup2(saved, 2)
        os.close(saved)
        data = b""
        try:
            os.set_blocking(r, False)
            idle = 0
            while idle < 2:
                try:
                    chunk = os.read(r, 65536)
                except BlockingIOError:
                    idle += 1
                    time.sleep(0.01)
                    continue
                if not chunk:
                    break
                data += chunk
                idle = 0
        finally:
            os.close(r)
        if data:
            keep = [line for line in data.splitlines(True) if not _KINETO_LINE.match(line)]
            if keep:
                try:
                    os.write(2, b"".join(keep))
                except OSError:
                    pass


# ---------------------------------------------------------------------------------------------
# torch access (the target's own torch; never imported by us)


def _torch():
    """The target's torch module once its import has finished, else None."""
    mod = sys.modules.get("torch")
    if mod is None:
        return None
    spec = getattr(mod, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return None
    if not hasattr(mod, "autograd") or not hasattr(mod, "_C"):
        return None
    return mod


def _cuda_in_use(torch):
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def _experimental_config(torch):
    """(config, all_threads): an _ExperimentalConfig that profiles every thread, if possible."""
    try:
        return torch._C._profiler._ExperimentalConfig(profile_all_threads=True), True
    except Exception:
        return None, False


def _new_profile(torch, record_shapes, experimental_config, use_cuda):
    """A low-level ``torch.autograd.profiler.profile`` (not ``torch.profiler.profile``, whose
    prepare step imports ``torch._inductor``: ~1 s and much memory in a target that never did)."""
    kwargs = {"use_kineto": True, "record_shapes": bool(record_shapes)}
    if experimental_config is not None:
        kwargs["experimental_config"] = experimental_config
    try:
        return torch.autograd.profiler.profile(use_device="cuda" if use_cuda else None, **kwargs)
    except TypeError:
        return torch.autograd.profiler.profile(use_cuda=bool(use_cuda), **kwargs)


class _Window:
    """One profiler window on the agent thread: start(), later stop() -> event tuples."""

    def __init__(self, torch, config, kineto_log, experimental_config, first_init):
        self.torch = torch
        self.record_shapes = bool(config["record_shapes"])
        self.use_cuda = _cuda_in_use(torch)
        self.prof = _new_profile(torch, self.record_shapes, experimental_config, self.use_cuda)
        self.kineto_log = kineto_log
        self.first_init = first_init
        self.log_level = None
        self.t_start = 0.0
        self.started_mono = 0.0
        self.running = False
        self.grace_s = 0.0  # of the stop, spent waiting for ops to drain (costs the target nothing)

    def start(self):
        prof = self.prof
        if self.first_init:
            _run_capturing_stderr(prof._prepare_trace)
        else:
            prof._prepare_trace()
        self.log_level = self.kineto_log.quiet()
        try:
            prof._start_trace()
        except BaseException:
            self.kineto_log.restore(self.log_level)
            raise
        self.t_start = time.time()
        self.started_mono = time.monotonic()
        self.running = True

    def stop(self):
        """End the window; returns the raw ``_KinetoEvent`` list (or [] on failure)."""
        if not self.running:
            return []
        age = time.monotonic() - self.started_mono
        if age < MIN_WINDOW_S:
            time.sleep(MIN_WINDOW_S - age)  # see MIN_WINDOW_S
        self.running = False
        c10_level = self.kineto_log.quiet_c10()
        try:
            self.grace_s = _remove_op_callbacks(self.torch, self.prof)
            self.prof.__exit__(None, None, None)
            results = self.prof.kineto_results
            return results.events() if results is not None else []
        finally:
            self.kineto_log.restore_c10(c10_level)
            self.kineto_log.restore(self.log_level)
            self.prof = None


def _remove_op_callbacks(torch, prof):
    """Stop recording CPU ops, then give ops in flight on other threads a moment to leave the
    profiler's callbacks before the window is finalised (see STOP_GRACE_S)."""
    toggle = getattr(prof, "toggle_collection_dynamic", None)
    if toggle is None:
        return 0.0
    try:
        toggle(False, [torch._C._profiler.ProfilerActivity.CPU])
    except Exception:
        return 0.0
    time.sleep(STOP_GRACE_S)  # the target runs freely meanwhile: not a cost of the window
    return STOP_GRACE_S


def _warm_up(torch, kineto_log, experimental_config):
    """One empty profile on this thread (the one that imported torch, at injection or arm()):
    lets a later background-thread profiler see every thread without libkineto complaining."""
    prof = _new_profile(torch, False, None, False)

    def run():
        prof._prepare_trace()
        old = kineto_log.quiet()
        try:
            prof._start_trace()
            prof.__exit__(None, None, None)
        finally:
            kineto_log.restore(old)

    if kineto_log.initialised():
        run()
    else:
        _run_capturing_stderr(run)


# ---------------------------------------------------------------------------------------------
# Spans: infertop.stage sinks and sys.monitoring timings


def parse_stage_patterns(items):
    """[[stage, pattern], ...] -> [(stage, file_glob or None, func_glob)]; raises ValueError."""
    out = []
    if not isinstance(items, (list, tuple)):
        raise ValueError("stage_functions must be a list of [stage, pattern] pairs")
    for item in items:
        if (
            not isinstance(item, (list, tuple))
            or len(item) != 2
            or not all(isinstance(x, str) and x for x in item)
        ):
            raise ValueError("bad stage_functions entry %r: expected [stage, pattern]" % (item,))
        stage, pattern = item
        if ":" in pattern:
            file_glob, func_glob = pattern.rsplit(":", 1)
            file_glob = file_glob or None
        else:
            file_glob, func_glob = None, pattern
        if not func_glob:
            raise ValueError("bad pattern %r: no function part" % pattern)
        out.append((stage, file_glob, func_glob))
    return out


def match_stage(patterns, filename, qualname, name):
    """The stage of the first pattern matching a function, else None.

    ``FUNC_GLOB`` matches the qualified name or its last part; ``FILE_GLOB:FUNC_GLOB`` also
    requires the file glob to match the full path of the function's file.
    """
    for stage, file_glob, func_glob in patterns:
        if file_glob is not None and not fnmatch.fnmatchcase(filename, file_glob):
            continue
        if fnmatch.fnmatchcase(qualname, func_glob) or fnmatch.fnmatchcase(name, func_glob):
            return stage
    return None


def find_stage_codes(patterns):
    """{code object: stage} for every function object alive in this process that matches."""
    import types

    found = {}
    if not patterns:
        return found
    seen = set()
    for obj in gc_objects():
        if type(obj) is not types.FunctionType:
            continue
        code = obj.__code__
        if id(code) in seen:
            continue
        seen.add(id(code))
        qualname = getattr(code, "co_qualname", None) or getattr(obj, "__qualname__", code.co_name)
        stage = match_stage(patterns, code.co_filename, qualname, code.co_name)
        if stage is not None:
            found[code] = stage
    return found


def gc_objects():
    import gc

    return gc.get_objects()


class _Monitor:
    """Per-call timings of chosen functions with ``sys.monitoring`` (Python >= 3.12).

    Local PY_START/PY_RETURN events on the matching code objects only; PY_UNWIND (which cannot
    be local) globally, ignored for any other code. Nothing is monkeypatched.
    """

    def __init__(self, codes, push):
        self.codes = dict(codes)
        self.push = push  # push(native_tid, stage, start_ns, end_ns)
        self.tool = None
        self.stacks = {}

    @staticmethod
    def available():
        return hasattr(sys, "monitoring")

    def install(self):
        mon = sys.monitoring
        for tool in (mon.PROFILER_ID, 4, 3, 5):
            try:
                mon.use_tool_id(tool, "infertop")
            except ValueError:
                continue
            self.tool = tool
            break
        if self.tool is None:
            raise RuntimeError("no free sys.monitoring tool id")
        ev = mon.events
        mon.register_callback(self.tool, ev.PY_START, self._on_start)
        mon.register_callback(self.tool, ev.PY_RETURN, self._on_return)
        mon.register_callback(self.tool, ev.PY_UNWIND, self._on_unwind)
        for code in self.codes:
            mon.set_local_events(self.tool, code, ev.PY_START | ev.PY_RETURN)
        mon.set_events(self.tool, ev.PY_UNWIND)
        return self.tool

    def uninstall(self):
        if self.tool is None:
            return
        mon = sys.monitoring
        tool, self.tool = self.tool, None
        ev = mon.events
        try:
            mon.set_events(tool, 0)
            for code in self.codes:
                try:
                    mon.set_local_events(tool, code, 0)
                except Exception:
                    pass
            for event in (ev.PY_START, ev.PY_RETURN, ev.PY_UNWIND):
                mon.register_callback(tool, event, None)
        finally:
            mon.free_tool_id(tool)
        self.stacks.clear()

    def _on_start(self, code, offset):
        try:
            stage = self.codes.get(code)
            if stage is None:
                return None
            ident = threading.get_ident()
            stack = self.stacks.get(ident)
            if stack is None:
                stack = self.stacks[ident] = []
            if len(stack) < 256:
                stack.append((code, time.perf_counter_ns()))
        except Exception:
            pass
        return None

    def _finish(self, code):
        try:
            if code not in self.codes:
                return
            stack = self.stacks.get(threading.get_ident())
            if not stack:
                return
            end = time.perf_counter_ns()
            while stack:
                c, start = stack.pop()
                if c is code:
                    self.push(threading.get_native_id(), self.codes[code], start, end)
                    return
        except Exception:
            pass

    def _on_return(self, code, offset, retval):
        self._finish(code)
        return None

    def _on_unwind(self, code, offset, exc):
        if code in self.codes:
            self._finish(code)
        return None


# ---------------------------------------------------------------------------------------------
# The agent


def _registered_agent():
    mod = sys.modules.get(REGISTRY_KEY)
    agent = getattr(mod, "agent", None) if mod is not None else None
    if agent is not None and agent.alive():
        return agent
    return None


class _Agent:
    def __init__(self, mode, idle_exit_s=20.0):
        self.mode = mode  # "injected" or "armed"
        self.idle_exit_s = idle_exit_s
        self.exiting = False
        self.config = dict(DEFAULT_CONFIG)
        self.path = None
        self.listener = None
        self.client = None
        self.decoder = None
        self.thread = None
        self.stop_requested = False
        self.started = False
        self.session = False  # a client configured or started something
        self.idle_since = time.monotonic()
        self.seq = 0
        self.window = None
        self.window_deadline = 0.0
        self.next_window = 0.0
        self.events_rate = None  # events/s seen in the last window; None before the first
        self.spans = collections.deque(maxlen=MAX_SPANS_BUFFERED)
        self.next_span_flush = 0.0
        self.next_allocator = 0.0
        self.sink_module = None
        self.monitor = None
        self.stage_codes = {}
        self.kineto_log = None
        self.kineto_ready = False
        self.experimental_config = None
        self.all_threads = False
        self.statuses_sent = set()
        self.clock_offset_ns = time.time_ns() - time.perf_counter_ns()
        self.lock = threading.Lock()
        self.atexit_registered = False

    # -- life cycle ---------------------------------------------------------------------------

    def alive(self):
        t = self.thread
        return t is not None and t.is_alive() and not self.stop_requested

    def open(self):
        uid = os.geteuid()
        sweep_stale_sockets(ensure_socket_dir(uid))  # what killed agents left behind
        path = socket_path(os.getpid(), uid)
        if os.path.exists(path) or os.path.islink(path):
            if os.path.islink(path) or not is_stale_socket(path):
                raise RuntimeError("%s is in use by another agent" % path)
            os.unlink(path)
        # bind under a temporary name and rename: the socket appears already listening, 0600
        tmp = "%s.%d.tmp" % (path, threading.get_native_id())
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            sock.bind(tmp)
            os.chmod(tmp, 0o600)
            sock.listen(4)
            sock.setblocking(False)
            os.rename(tmp, path)
        except BaseException:
            sock.close()
            for p in (tmp, path):
                try:
                    os.unlink(p)
                except OSError:
                    pass
            raise
        self.listener = sock
        self.path = path

    def prepare_torch(self, on_this_thread):
        """Set up profiling if torch is imported; ``on_this_thread``: also warm up here."""
        torch = _torch()
        if torch is None or self.kineto_ready:
            return
        self.kineto_log = _KinetoLog()
        self.experimental_config, self.all_threads = _experimental_config(torch)
        if on_this_thread:
            _warm_up(torch, self.kineto_log, self.experimental_config)
        self.kineto_ready = True

    def start_thread(self):
        t = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self.thread = t
        self._register()
        t.start()

    def _register(self):
        import types

        mod = types.ModuleType(REGISTRY_KEY)
        mod.agent = self
        sys.modules[REGISTRY_KEY] = mod
        import atexit

        atexit.register(self._atexit)
        self.atexit_registered = True
        if self.mode == "armed" and hasattr(os, "register_at_fork"):
            # an armed agent lives as long as the process: registering once is no leak
            os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self):
        """A forked child (a DataLoader worker, a pre-fork server worker) is not armed: it drops
        its copies of the agent's sockets (the parent's socket file stays the parent's) and
        forgets the agent; inject into it to profile it."""
        self.stop_requested = True
        self.path = None
        for sock in (self.listener, self.client):
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass
        self.listener = None
        self.client = None
        self.window = None
        mod = sys.modules.get(REGISTRY_KEY)
        if mod is not None and getattr(mod, "agent", None) is self:
            sys.modules.pop(REGISTRY_KEY, None)

    def _unregister(self):
        mod = sys.modules.get(REGISTRY_KEY)
        if mod is not None and getattr(mod, "agent", None) is self:
            try:
                del sys.modules[REGISTRY_KEY]
            except KeyError:
                pass
        if self.atexit_registered and not self.exiting:
            import atexit

            atexit.unregister(self._atexit)
            self.atexit_registered = False

    def _atexit(self):
        self.exiting = True
        self.stop_requested = True
        t = self.thread
        if t is not None and t is not threading.current_thread():
            t.join(2.0)

    def request_stop(self):
        self.stop_requested = True

    # -- the thread -------------------------------------------------------------------------

    def _run(self):
        errors = []
        try:
            while not self.stop_requested:
                try:
                    self._step()
                except Exception as exc:
                    # a bug of ours must not take the target down, nor leave profiling on:
                    # end this session (the client is told) and keep serving; give up if it
                    # keeps happening
                    now = time.monotonic()
                    errors[:] = [t for t in errors if now - t < 10.0] + [now]
                    self._send({"type": "status", "state": "agent-error", "message": "agent error: %r" % (exc,)})
                    self._detach()
                    if len(errors) >= 5:
                        break
                    time.sleep(0.1)
        except BaseException:
            pass
        finally:
            self._shutdown()

    def _wait_for_io(self, timeout_ms):
        """The agent thread's only wait: the fds that are ready. (A function of its own so that
        a sampler can tell the agent waiting from the agent working: infertop counts this frame
        as idle, config.WAIT_FRAMES.)"""
        poller = select.poll()
        poller.register(self.listener.fileno(), select.POLLIN)
        if self.client is not None:
            poller.register(self.client.fileno(), select.POLLIN)
        try:
            ready = poller.poll(timeout_ms)
        except InterruptedError:
            ready = []
        return [fd for fd, _mask in ready]

    def _step(self):
        now = time.monotonic()
        wake = now + 0.5
        if self.window is not None:
            wake = min(wake, self.window_deadline)
        elif self.started and self.next_window:
            wake = min(wake, self.next_window)
        if self.started:
            wake = min(wake, self.next_span_flush, self.next_allocator)
        fds = self._wait_for_io(max(0, int((wake - now) * 1000)))
        if self.client is not None and self.client.fileno() in fds:
            self._read_client()  # first: a client that just left makes room for the next
        if self.listener is not None and self.listener.fileno() in fds:
            self._accept()
        self._tick()

    def _tick(self):
        now = time.monotonic()
        if self.client is None and self.mode == "injected" and now - self.idle_since > self.idle_exit_s:
            self.stop_requested = True  # nobody came (or came back): remove ourselves
            return
        if self.window is not None and (now >= self.window_deadline or not self.started):
            self._end_window(send=self.started and self.client is not None, full=self.started)
        if not self.started or self.client is None:
            return
        if self.window is None and now >= self.next_window:
            self._begin_window()
        if now >= self.next_span_flush:
            self.next_span_flush = now + SPAN_FLUSH_S
            self._flush_spans()
        if now >= self.next_allocator:
            self.next_allocator = now + ALLOCATOR_EVERY_S
            self._send_allocator()

    def _shutdown(self):
        # the socket goes first: a client waiting for it to vanish need not wait for the rest
        if self.listener is not None:
            try:
                self.listener.close()
            except OSError:
                pass
            self.listener = None
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            try:
                os.rmdir(os.path.dirname(self.path))
            except OSError:
                pass
        for step in (self._end_window_quietly, self._stop_collection, self._close_client, self._unregister):
            try:
                step()
            except BaseException:
                pass

    def _end_window_quietly(self):
        if self.window is not None:
            self._end_window(send=False)

    # -- connections --------------------------------------------------------------------------

    def _accept(self):
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        try:
            uid = peer_uid(conn)
        except OSError:
            uid = -1
        if not peer_allowed(uid):
            conn.close()  # not ours to talk to: no reply at all
            return
        if self.client is not None:
            probe = select.poll()
            probe.register(self.client.fileno(), select.POLLIN)
            if probe.poll(0):
                self._read_client()  # maybe it has just gone
        if self.client is not None:
            try:
                conn.settimeout(0.2)
                try:
                    conn.recv(4096)  # its hello first: closing on unread data resets the peer
                except OSError:
                    pass
                conn.settimeout(1.0)
                conn.sendall(encode_msg({"type": "error", "message": "another client is connected"}))
            except Exception:
                pass
            conn.close()
            return
        conn.settimeout(SEND_TIMEOUT_S)
        self.client = conn
        self.decoder = FrameDecoder()
        self.session = False

    def _read_client(self):
        try:
            data = self.client.recv(65536)
        except socket.timeout:
            return
        except OSError:
            data = b""
        if not data:
            self._client_gone()
            return
        try:
            messages = self.decoder.feed(data)
        except ProtocolError as exc:
            self._send({"type": "error", "message": "protocol error: %s" % exc})
            self._client_gone()
            return
        for msg in messages:
            if self.client is None:
                return
            self._handle(msg)

    def _send(self, obj):
        client = self.client
        if client is None:
            return False
        try:
            data = encode_msg(obj)
        except ProtocolError:
            return False
        try:
            client.sendall(data)
        except OSError:
            self._client_gone()
            return False
        return True

    def _close_client(self):
        client, self.client = self.client, None
        self.decoder = None
        self.idle_since = time.monotonic()
        if client is not None:
            try:
                client.close()
            except OSError:
                pass

    def _client_gone(self):
        """Leaving without detach counts as detach once the client configured or started
        something; a client that only said hello (a probe) just goes."""
        if self.session:
            self._detach()
        else:
            self._close_client()

    def _detach(self):
        self.started = False
        if self.window is not None:
            self._end_window(send=False)
        self._stop_collection()
        self._close_client()
        self.config = dict(DEFAULT_CONFIG)
        self.stage_codes = {}
        self.statuses_sent = set()
        if self.mode == "injected":
            self.stop_requested = True

    # -- commands -----------------------------------------------------------------------------

    def _handle(self, msg):
        cmd = msg.get("cmd")
        if cmd == "hello":
            self._send(self._hello())
        elif cmd == "configure":
            self.session = True
            try:
                self._configure(msg)
            except ValueError as exc:
                self._send({"type": "error", "message": "configure: %s" % exc})
                return
            self._send({"type": "ok", "cmd": "configure", "config": dict(self.config)})
        elif cmd == "start":
            self.session = True
            self._send({"type": "ok", "cmd": "start"})
            self._start()
        elif cmd == "stop":
            self.started = False
            if self.window is not None:
                self._end_window(send=self.client is not None)
            self._stop_collection()
            self._send({"type": "ok", "cmd": "stop"})
        elif cmd == "detach":
            self._send({"type": "ok", "cmd": "detach"})
            self._detach()
        else:
            self._send({"type": "error", "message": "unknown command %r" % (cmd,)})

    def _hello(self):
        torch = _torch()
        if torch is not None and not self.kineto_ready:
            self.prepare_torch(on_this_thread=False)
        return {
            "type": "hello",
            "agent": AGENT_NAME,
            "pid": os.getpid(),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "torch": getattr(torch, "__version__", None) if torch is not None else None,
            "cuda": _cuda_in_use(torch) if torch is not None else False,
            "armed": self.mode == "armed",
            "monitoring": _Monitor.available(),
            "all_threads": bool(self.all_threads),
            "agent_tid": self.thread.native_id if self.thread is not None else None,
        }

    def _configure(self, msg):
        new = dict(self.config)
        for key in ("window_s", "period_s"):
            if key in msg:
                value = msg[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                    raise ValueError("%s must be a number" % key)
                lo, hi = LIMITS[key]
                new[key] = float(min(max(value, lo), hi))
        if "max_events" in msg:
            value = msg["max_events"]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError("max_events must be an integer")
            lo, hi = LIMITS["max_events"]
            new["max_events"] = int(min(max(value, lo), hi))
        if "record_shapes" in msg:
            if not isinstance(msg["record_shapes"], bool):
                raise ValueError("record_shapes must be true or false")
            new["record_shapes"] = msg["record_shapes"]
        patterns = None
        if "stage_functions" in msg:
            patterns = parse_stage_patterns(msg["stage_functions"])
            new["stage_functions"] = [list(p) for p in msg["stage_functions"]]
        if new["period_s"] < new["window_s"]:
            new["period_s"] = new["window_s"]
        self.config = new
        if patterns is not None:
            codes = find_stage_codes(patterns) if _Monitor.available() else {}
            if len(codes) > MAX_STAGE_FUNCTIONS:
                # a pattern such as "*" would time every call in the target
                self._status_once(
                    "monitoring",
                    "off",
                    "stage rules match %d functions (more than %d): not timing them; "
                    "make the patterns narrower" % (len(codes), MAX_STAGE_FUNCTIONS),
                )
                codes = {}
            was_running = self.monitor is not None
            if was_running:
                self._stop_monitor()
            self.stage_codes = codes
            if was_running:
                self._start_monitor()

    def _start(self):
        now = time.monotonic()
        first = not self.started
        self.started = True
        if first:
            self.next_window = max(now, self.next_window)  # a backed-off period still holds
            self.next_span_flush = now + SPAN_FLUSH_S
            self.next_allocator = now
            self.clock_offset_ns = time.time_ns() - time.perf_counter_ns()
        self._install_sink()
        if self.stage_codes and self.monitor is None:
            self._start_monitor()
        if self.config["stage_functions"] and not _Monitor.available():
            self._status_once(
                "monitoring", "off", "stage_functions need Python >= 3.12 (sys.monitoring)"
            )

    # -- spans --------------------------------------------------------------------------------

    def _span_sink(self, thread_id, name, start_ns, end_ns):
        self.spans.append((threading.get_native_id(), name, start_ns, end_ns))

    def _push_span(self, tid, stage, start_ns, end_ns):
        self.spans.append((tid, stage, start_ns, end_ns))

    def _install_sink(self):
        if self.sink_module is not None:
            return
        mod = sys.modules.get("infertop.annotate")
        setter = getattr(mod, "set_span_sink", None) if mod is not None else None
        if setter is None:
            return
        try:
            setter(self._span_sink)
            self.sink_module = mod
        except Exception:
            pass

    def _remove_sink(self):
        mod, self.sink_module = self.sink_module, None
        if mod is None:
            return
        try:
            if getattr(mod, "_sink", None) == self._span_sink:
                mod.set_span_sink(None)
        except Exception:
            pass

    def _start_monitor(self):
        if not self.stage_codes or not _Monitor.available():
            return
        monitor = _Monitor(self.stage_codes, self._push_span)
        try:
            monitor.install()
        except Exception as exc:
            try:
                monitor.uninstall()
            except Exception:
                pass
            self._status_once("monitoring", "off", "cannot time stage functions: %s" % exc)
            return
        self.monitor = monitor

    def _stop_monitor(self):
        monitor, self.monitor = self.monitor, None
        if monitor is not None:
            try:
                monitor.uninstall()
            except Exception:
                pass

    def _stop_collection(self):
        self._remove_sink()
        self._stop_monitor()
        self.spans.clear()

    def _flush_spans(self):
        if self.sink_module is None:
            self._install_sink()  # infertop.annotate may have been imported since
        if not self.spans:
            return
        offset = time.time_ns() - time.perf_counter_ns()
        batch = []
        popleft = self.spans.popleft
        while len(batch) < 20000:
            try:
                tid, stage, start, end = popleft()
            except IndexError:
                break
            batch.append([tid, stage, (start + offset) / 1e9, (end + offset) / 1e9])
        if batch:
            self._send({"type": "spans", "spans": batch})

    # -- allocator ----------------------------------------------------------------------------

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

    # -- profiler windows -----------------------------------------------------------------------

    def _status_once(self, key, state, message):
        if key in self.statuses_sent:
            return
        self.statuses_sent.add(key)
        self._send({"type": "status", "state": state, "message": message})

    def _window_length(self):
        """window_s, shortened so that the expected event count stays under 80 % of max_events;
        the first window is a short probe of the event rate."""
        wanted = self.config["window_s"]
        if self.events_rate is None:
            return min(wanted, PROBE_WINDOW_S)
        if self.events_rate <= 0:
            return wanted
        return min(wanted, max(MIN_WINDOW_S, 0.8 * self.config["max_events"] / self.events_rate))

    def _begin_window(self):
        period = self.config["period_s"]
        now = time.monotonic()
        self.next_window = now + period
        torch = _torch()
        if torch is None:
            self._status_once(
                "no-torch", "no-profiler", "torch is not imported in the target: no profiler windows"
            )
            return
        if not self.kineto_ready:
            self.prepare_torch(on_this_thread=False)
        try:
            if torch.autograd.profiler._is_profiler_enabled or torch._C._autograd._profiler_enabled():
                self._status_once(
                    "busy", "profiler-busy", "the target is running its own torch.profiler; windows skipped"
                )
                return
        except Exception:
            pass
        if not self.all_threads:
            self._status_once(
                "threads",
                "partial",
                "this torch cannot profile other threads from the agent's thread",
            )
        first_init = self.kineto_log is None or not self.kineto_log.initialised()
        try:
            window = _Window(torch, self.config, self.kineto_log, self.experimental_config, first_init)
            window.start()
        except Exception as exc:
            self._status_once("start-failed", "no-profiler", "profiler window failed to start: %s" % exc)
            return
        self.window = window
        self.window_deadline = time.monotonic() + self._window_length()

    def _end_window(self, send, full=False):
        window, self.window = self.window, None
        if window is None:
            return
        t_end = time.time()
        t_start = window.t_start
        work_start = time.monotonic()
        try:
            raw = window.stop()
        except Exception as exc:
            self._send({"type": "status", "state": "window-failed", "message": "profiler stop failed: %s" % exc})
            return
        stopped_ns = time.time_ns()
        if not send:
            del raw
            _trim_heap()
            return
        max_events = self.config["max_events"]
        n = len(raw)
        truncated = n > max_events
        try:
            if truncated:
                # events come sorted by start time: keep the first max_events, i.e. every
                # thread's activity up to a cut-off time, and say the window ends there
                t_end = raw[max_events].start_ns() / 1e9
            elif n:
                # events recorded while the profiler was being stopped belong to the window
                last = max(min(e.start_ns() + e.duration_ns(), stopped_ns) for e in raw[-64:]) / 1e9
                if last > t_end:
                    t_end = last
        except Exception:
            pass
        try:
            events = kineto_events(raw, max_events, window.record_shapes, end_ns=stopped_ns)
            del raw
            body = reduce_events(events, t_start, t_end, device_profiled=window.use_cuda)
        except Exception as exc:
            self._send({"type": "status", "state": "window-failed", "message": "cannot read profile: %s" % exc})
            return
        del events
        _trim_heap()
        recorded = max(work_start - window.started_mono, 1e-3)
        if full or truncated:
            # the next window's length follows from this rate (see _window_length); rates
            # fluctuate, so a lower one only halves the estimate
            rate = n / recorded
            if self.events_rate is None or rate > 0.5 * self.events_rate:
                self.events_rate = rate
            else:
                self.events_rate *= 0.5
        # what this window cost the target; stretch the period to keep within COST_BUDGET
        cost = WINDOW_SLOWDOWN * recorded + (time.monotonic() - work_start - window.grace_s)
        period = self.config["period_s"]
        wait = max(period, cost / COST_BUDGET)
        self.next_window = max(self.next_window, window.started_mono + wait)
        if wait > period * 1.05:
            self._status_once(
                "backoff",
                "backoff",
                "windows cost the target ~%.0f ms each (%d events): one every %.0f s instead of %.0f s"
                % (cost * 1000, n, wait, period),
            )
        self.seq += 1
        msg = {
            "type": "window",
            "seq": self.seq,
            "t_start": t_start,
            "t_end": t_end,
            "events": n,
            "truncated": truncated,
            "cost_s": round(cost, 4),
        }
        msg.update(body)
        if truncated:
            self._send(
                {
                    "type": "status",
                    "state": "window-truncated",
                    "message": "window %d: read the first %d of %d events; next windows are shorter (%.2f s)"
                    % (self.seq, max_events, n, self._window_length()),
                }
            )
        self._send(msg)


_malloc_trim = []


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


def _free_region(region):
    """Free the bytes an injector wrote the bootstrap into: ``(address, size, how)``.

    Safe as soon as the bootstrap runs: CPython has parsed (copied) the string by then.
    """
    if not region:
        return
    try:
        import ctypes

        addr, size, how = region
        if how == "munmap":
            libc = ctypes.CDLL(None)
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(size))
        elif how == "pymem":
            ctypes.pythonapi.PyMem_RawFree.argtypes = [ctypes.c_void_p]
            ctypes.pythonapi.PyMem_RawFree.restype = None
            ctypes.pythonapi.PyMem_RawFree(ctypes.c_void_p(addr))
    except Exception:
        pass


def _infertop_agent_start(mode="injected", deadline=None, boot_file=None, free_region=None, idle_exit_s=20.0):
    """Start the agent in this process (once); returns it, or None when nothing was started.

    Injected mode never raises (nothing may leak into the target); armed mode raises on errors.
    """
    if boot_file:
        try:
            os.unlink(boot_file)
        except OSError:
            pass
    _free_region(free_region)
    agent = None
    try:
        if deadline is not None and time.time() > deadline:
            return None  # the injector gave up on us: stay out
        existing = _registered_agent()
        if existing is not None:
            return existing
        agent = _Agent(mode, idle_exit_s=idle_exit_s)
        agent.open()
        try:
            agent.prepare_torch(on_this_thread=True)
        except Exception:
            pass
        agent.start_thread()
        return agent
    except BaseException:
        if agent is not None and agent.thread is None:
            agent._shutdown()
        if mode != "injected":
            raise
        return None


def payload_source(
    mode="injected", deadline=None, boot_file=None, free_region=None, idle_exit_s=20.0, free_region_from_bootstrap=False
):
    """The source to run in a target: protocol.py + payload.py + a call that starts the agent.

    ``free_region_from_bootstrap``: take the region to free from the ``_infertop_free`` global
    the injector's bootstrap passes in (its address is known only inside the target).
    """
    here = os.path.dirname(os.path.abspath(__file__))
    parts = []
    for name in ("protocol.py", "payload.py"):
        with open(os.path.join(here, name), "r", encoding="utf-8") as fh:
            text = fh.read()
        parts.append(text.replace("from __future__ import annotations\n", "", 1))
    if free_region_from_bootstrap:
        region = 'globals().get("_infertop_free")'
    else:
        region = repr(tuple(free_region) if free_region else None)
    call = "_infertop_agent_start(mode=%r, deadline=%r, boot_file=%r, free_region=%s, idle_exit_s=%r)\n" % (
        mode,
        deadline,
        boot_file,
        region,
        float(idle_exit_s),
    )
    return "from __future__ import annotations\n" + "\n".join(parts) + "\n" + call
