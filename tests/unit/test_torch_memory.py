"""Torch memory by stage and op (profile_memory): a window's memory events reduced by the
agent's own code, carried by name, merged over windows and reported."""

from __future__ import annotations

from infertop.agent.payload.reduce import reduce_events
from infertop.analysis.ops import merge_windows
from infertop.model.fields import decode_op_window, op_window_fields
from infertop.report.memory import memory_dict

MIB = 1 << 20
T0 = 1_700_000_000_000_000_000


def op(name, tid, start_us, dur_us, ident):
    return ("cpu_op", name, tid, T0 + start_us * 1000, dur_us * 1000, ident, 0, 0, None)


def ann(name, tid, start_us, dur_us):
    return ("user_annotation", name, tid, T0 + start_us * 1000, dur_us * 1000, 0, 0, 0, None)


def mem(tid, at_us, nbytes, device="cuda"):
    return ("memory", "[memory]", tid, T0 + at_us * 1000, 0, 0, 0, nbytes, device)


def _window(events):
    body = reduce_events(events, T0 / 1e9, T0 / 1e9 + 1, memory=True)
    return decode_op_window(dict(body, t_start=T0 / 1e9, t_end=T0 / 1e9 + 1, source="agent",
                                 events=len(events), truncated=False))  # fmt: skip


def two_forward_calls():
    """Two calls of an unannotated forward 10 ms apart (stretches of ops), each allocating
    4 MiB then 2 MiB, freeing the 4 MiB, a preprocess stage annotated around one op."""
    ev = [ann("infertop:preprocess", 1, 0, 100), op("aten::to", 1, 10, 50, 1), mem(1, 20, MIB)]
    for i, t in enumerate((1000, 11000)):
        ev += [
            op("aten::linear", 1, t, 400, 10 + 3 * i),
            op("aten::addmm", 1, t + 10, 300, 11 + 3 * i),
            mem(1, t + 20, 4 * MIB),
            op("aten::relu", 1, t + 500, 100, 12 + 3 * i),
            mem(1, t + 510, 2 * MIB),
            mem(1, t + 590, -4 * MIB),
        ]
    return ev


def test_bytes_by_stage_and_op_and_the_peak_of_each_forward_call():
    w = _window(two_forward_calls())
    assert w.memory is not None
    stages = {(s.stage, s.device): s for s in w.memory.stages}
    fwd = stages[("forward", "cuda")]
    assert (fwd.calls, fwd.allocs, fwd.alloc_bytes, fwd.freed_bytes) == (2, 4, 12 * MIB, 8 * MIB)
    assert fwd.peak_max == 6 * MIB and fwd.peak_sum == 12 * MIB
    pre = stages[("preprocess", "cuda")]
    assert (pre.calls, pre.alloc_bytes, pre.peak_max) == (1, MIB, MIB)
    ops = {o.names: o for o in w.memory.ops}
    assert ops[("aten::linear", "aten::addmm")].alloc_bytes == 8 * MIB
    assert ops[("aten::relu",)].alloc_bytes == 4 * MIB
    # carried by name, as a recording holds it
    assert decode_op_window(op_window_fields(w)) == w


def test_windows_without_profile_memory_carry_none_and_old_fields_decode():
    body = reduce_events([op("aten::mm", 1, 0, 10, 1)], T0 / 1e9, T0 / 1e9 + 1)
    assert "memory" not in body
    fields = dict(body, t_start=0.0, t_end=1.0, source="agent", events=1, truncated=False)
    assert decode_op_window(fields).memory is None


def test_report_torch_by_stage_and_the_forward_peak():
    totals = merge_windows([_window(two_forward_calls()), _window(two_forward_calls())])
    torch = memory_dict(None, totals.torch_memory())["torch"]
    fwd = torch["by_stage"]["forward"]["cuda"]
    assert fwd["calls"] == 4 and fwd["alloc_bytes_per_call"] == 6 * MIB
    assert fwd["peak_per_call_bytes"] == 6 * MIB and torch["peak_per_call_bytes"] == 6 * MIB
    assert torch["ops"][0]["op"] == "aten::addmm" and torch["ops"][0]["alloc_bytes_per_call"] == 4 * MIB
    assert memory_dict(None, merge_windows([]).torch_memory()) is None


def test_text_report_lines():
    from infertop.report.memory import memory_lines

    totals = merge_windows([_window(two_forward_calls())])
    lines = memory_lines({"memory": memory_dict(None, totals.torch_memory())})
    assert lines[0].startswith("torch memory (1 profiler window with profile_memory)")
    assert "  forward (cuda): 6.0 MiB allocated per call, peak 6.0 MiB per call (max 6.0 MiB)" in lines
    assert any(line.strip().startswith("aten::addmm (forward, cuda): 4.0 MiB per call") for line in lines)


def test_fragmentation_with_the_allocator_retrying_is_at_least_medium():
    from infertop.analysis.findings.rules import RULES, FindingInput, MemoryState
    from infertop.config import FindingThresholds

    rule = RULES["allocator-fragmentation"]
    gib = 1 << 30
    calm = rule(FindingInput(memory=MemoryState(80 * gib, 10 * gib, 6 * gib)), FindingThresholds())
    retrying = rule(FindingInput(memory=MemoryState(80 * gib, 10 * gib, 6 * gib, 3)), FindingThresholds())
    assert calm is not None and calm.severity == "low" and calm.evidence["alloc_retries"] == 0
    assert retrying is not None and retrying.severity == "medium" and retrying.evidence["alloc_retries"] == 3
    assert "expandable_segments:True" in retrying.hint and "retrying (3 retries)" in retrying.title


def test_headroom_at_the_largest_batch_on_cuda():
    from dataclasses import replace

    small, large = _window(two_forward_calls()), _window(two_forward_calls())
    small = replace(small, memory=replace(small.memory, rows=4))
    large = replace(large, memory=replace(large.memory, rows=8))
    assert decode_op_window(op_window_fields(large)).memory.rows == 8
    totals = merge_windows([small, large, _window(two_forward_calls())])  # the last: rows unknown
    gpu = {"free": 10 * 1024 * MIB, "reserved": 4 * 1024 * MIB, "allocated": 3 * 1024 * MIB}
    batch = memory_dict(None, totals.torch_memory(), gpu)["torch"]["batch"]
    # 6 MiB at 8 rows: 0.75 MiB a row; 10 GiB free + 1 GiB cached slack
    assert batch == {"rows": 8, "device": "cuda", "peak_bytes": 6 * MIB, "peak_per_row_bytes": 0.75 * MIB,
                     "free_bytes": 11 * 1024 * MIB, "more_rows": 15018}  # fmt: skip
    assert memory_dict(None, totals.torch_memory())["torch"]["batch"]["more_rows"] is None


def test_diff_gates_a_forward_peak_that_grows(tmp_path, capsys):
    import json
    from dataclasses import replace

    from infertop.cli import main
    from infertop.model.events import TargetInfo
    from infertop.record.writer import RecordingWriter

    def recording(name, scale):
        w = _window(two_forward_calls())
        stages = tuple(replace(s, peak_max=s.peak_max * scale, peak_sum=s.peak_sum * scale)
                       for s in w.memory.stages)  # fmt: skip
        out = RecordingWriter(str(tmp_path / name))
        out.write([TargetInfo(7, "python serve.py", "3.12.1", None, T0 / 1e9)])
        out.write([replace(w, memory=replace(w.memory, stages=stages))])
        out.close()
        return str(tmp_path / name)

    base, grown = recording("a.infertop", 1), recording("b.infertop", 10)  # 6 MiB → 60 MiB
    capsys.readouterr()
    assert main(["diff", base, grown, "--fail-above", "10", "--format", "json"]) == 1
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["compared"]}
    row = rows["forward peak per call"]
    assert row["what"] == "torch memory" and row["regressed"]
    assert row["base"] == 6 * MIB and row["new"] == 60 * MIB
    assert main(["diff", base, base, "--fail-above", "10"]) == 0
    assert "torch memory (the largest peak of a forward call" in capsys.readouterr().out


def _cuda_trace() -> dict:
    """A torch.profiler trace of two CUDA steps, its [memory] events as export_chrome_trace
    writes them (cat cpu_instant_event, ph i, args Bytes and Device Type 1: CUDA)."""
    base = 5_000_000_000.0  # µs

    def x(cat, name, ts, dur, ext):
        return {"ph": "X", "cat": cat, "name": name, "pid": 9, "tid": 9, "ts": base + ts, "dur": dur,
                "args": {"External id": ext}}  # fmt: skip

    def m(ts, nbytes, total):
        return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 9, "tid": 9,
                "ts": base + ts, "args": {"Total Reserved": 64 * MIB, "Total Allocated": total, "Bytes": nbytes,
                                          "Device Id": 0, "Device Type": 1, "Addr": 1, "Ev Idx": 1}}  # fmt: skip

    events = []
    for i, t in enumerate((0.0, 10_000.0)):
        events += [
            x("user_annotation", f"ProfilerStep#{i + 1}", t, 5000, 100 + i),
            x("cpu_op", "aten::linear", t + 10, 400, 10 + i),
            m(t + 20, 32 * MIB, 32 * MIB),
            x("cpu_op", "aten::softmax", t + 500, 100, 20 + i),
            m(t + 510, 16 * MIB, 48 * MIB),
            m(t + 590, -32 * MIB, 16 * MIB),
        ]
    return {"traceEvents": events}


def test_a_cuda_trace_with_profile_memory_imports_with_its_torch_memory(tmp_path, capsys):
    import json

    from infertop.cli import main
    from infertop.trace.table import parse_trace, read_trace

    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_cuda_trace()))
    fast, slow = read_trace(str(path)), parse_trace(_cuda_trace())
    for t in (fast, slow):  # msgspec's typed decode and the general path read them alike
        mem = t.names.index("[memory]")
        assert sorted((t.nbytes[t.name == mem] // MIB).tolist()) == [-32, -32, 16, 16, 32, 32]
        assert set(t.device[t.name == mem].tolist()) == {1}
    out = tmp_path / "trace.infertop"
    assert main(["import", str(path), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    torch = json.loads(capsys.readouterr().out)["memory"]["torch"]
    fwd = torch["by_stage"]["forward"]["cuda"]  # each step one window, one call of forward
    assert (torch["windows"], fwd["calls"], fwd["alloc_bytes_per_call"]) == (2, 2, 48 * MIB)
    assert fwd["peak_max_bytes"] == 48 * MIB and torch["peak_per_call_bytes"] == 48 * MIB
    assert [o["op"] for o in torch["ops"]] == ["aten::linear", "aten::softmax"]
