"""The memory part of a window's reduction (``profile_memory``: the allocator's reports): what
each stage and op allocated and each stage's peak per call, for ``reduce.py``'s ``memory`` field;
and the stage an op belongs to, which the op tables share."""

from __future__ import annotations

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.constants import MAX_MEMORY_OP_ROWS, OP_GAP_NS

# -- end --


def _stage_lookup(ops):
    """``stage_of(record)``: an op's stage, its annotation's, else ``sync`` if it waited on the
    device, else ``forward``."""
    rec_stage = ops.stage
    rec_sync = ops.sync

    def stage_of(idx):
        stage = rec_stage[idx]
        if stage is not None:
            return stage
        return "sync" if rec_sync[idx] else "forward"

    return stage_of


def _add_bytes(acc, device, nbytes):
    """One allocation (or free) into a call's ``{device: [bytes now, peak]}``."""
    a = acc.get(device)
    if a is None:
        a = acc[device] = [0, 0]
    a[0] += nbytes
    if a[0] > a[1]:
        a[1] = a[0]


def _stretch_calls(ops, stage_of, gap_ns=OP_GAP_NS):
    """Calls of ``forward`` where no stage annotation says where calls begin: per thread, each
    stretch of top-level ``forward`` ops less than ``gap_ns`` apart (as ``op_time``'s), with the
    peak of the bytes allocated in it over its start. Returns [(stage, {device: [now, peak]})]."""
    calls = []
    mem_by_tid = {}
    for m in ops.memory:
        mem_by_tid.setdefault(m[0], []).append(m)
    rec_dur = ops.dur
    for tid, records in ops.top_records.items():
        tops = ops.tops_by_tid[tid]
        stretches = []  # [start, end]
        for i, rec in enumerate(records):
            if stage_of(rec) != "forward":
                continue
            s, e = tops[i][0], tops[i][0] + rec_dur[rec]
            if stretches and s - stretches[-1][1] < gap_ns:
                if e > stretches[-1][1]:
                    stretches[-1][1] = e
            else:
                stretches.append([s, e])
        mem = mem_by_tid.get(tid, ())
        j = 0
        for s, e in stretches:
            acc = {}
            while j < len(mem) and mem[j][1] < s:
                j += 1
            while j < len(mem) and mem[j][1] <= e:
                if mem[j][5] is None:  # not inside an annotated stage
                    _add_bytes(acc, mem[j][3], mem[j][2])
                j += 1
            calls.append(("forward", acc))
    return calls


def memory_table(ops, path_of):
    """The window's ``memory`` field: what the allocator reported (``profile_memory``), by stage
    and by op, and each stage's peak per call.

    ``stages``: ``[stage, device, calls, allocs, alloc_bytes, freed_bytes, peak_max,
    peak_sum]``: an allocation belongs to the stage of the op it happened in (of the annotation
    around it outside any op, else ``forward``); its calls are the stage annotations in the
    window, or for ``forward`` without any, the stretches of top-level ops (``op_time``'s); a
    call's peak is the most its bytes (allocated less freed) rose over its start; ``peak_max``
    the largest, ``peak_sum`` their sum (the mean is ``peak_sum / calls``). ``ops``: ``[path,
    stage, device, allocs, alloc_bytes]`` of the innermost op each allocation happened in, the
    largest ``MAX_MEMORY_OP_ROWS``."""
    stage_of = _stage_lookup(ops)
    rec_node = ops.node
    by_stage = {}
    by_op = {}
    for _tid, _start, nbytes, device, op, ann_stage in ops.memory:
        if op >= 0:
            stage = stage_of(op)
        else:
            stage = ann_stage if ann_stage is not None else "forward"
        a = by_stage.get((stage, device))
        if a is None:
            a = by_stage[(stage, device)] = [0, 0, 0]
        if nbytes >= 0:
            a[0] += 1
            a[1] += nbytes
            if op >= 0:
                key = (rec_node[op], stage, device)
                b = by_op.get(key)
                if b is None:
                    by_op[key] = [1, nbytes]
                else:
                    b[0] += 1
                    b[1] += nbytes
        else:
            a[2] -= nbytes
    calls = ops.stage_calls
    annotated = {stage for stage, _acc in calls}
    if "forward" not in annotated:
        calls = calls + _stretch_calls(ops, stage_of)
    peaks = {}  # stage -> [calls, {device: [peak_max, peak_sum]}]
    for stage, acc in calls:
        p = peaks.get(stage)
        if p is None:
            p = peaks[stage] = [0, {}]
        p[0] += 1
        for device, (_now, peak) in acc.items():
            d = p[1].get(device)
            if d is None:
                p[1][device] = [peak, peak]
            else:
                if peak > d[0]:
                    d[0] = peak
                d[1] += peak
    stages = []
    for (stage, device), a in sorted(by_stage.items(), key=lambda kv: -kv[1][1]):
        p = peaks.get(stage)
        d = p[1].get(device) if p is not None else None
        stages.append(
            [stage, device, p[0] if p is not None else 0, a[0], a[1], a[2],
             d[0] if d else 0, d[1] if d else 0]
        )  # fmt: skip
    op_rows = [
        [path_of(node), stage, device, b[0], b[1]]
        for (node, stage, device), b in sorted(by_op.items(), key=lambda kv: -kv[1][1])[
            :MAX_MEMORY_OP_ROWS
        ]
    ]
    return {"stages": stages, "ops": op_rows}
