"""``infertop export FILE --format kineto -o OUT.json[.gz]``: a recording's torch-profiler
windows as one torch.profiler (Kineto) trace, for TensorBoard and Holistic Trace Analysis.

The agent sends aggregated windows, not raw events, so the trace is rebuilt from them: in each
window, one ``cpu_op`` per op call path (outermost first, children inside their parent, laid
out from the window's start; its duration is the path's total time, ``args.calls`` how many
calls that was), one ``cudaLaunchKernel`` inside each op that launched device work, and one
``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` per (op, kernel) on device 0 stream 7 with the
launch's correlation id and an ``ac2g`` flow. ``record_function`` ranges (``ProfilerStep#N``
...) keep their real times and threads as ``user_annotation`` events. Kernel and copy time per
window, op self and total time, and steps are therefore exact; the order of calls within a
window is not. Timestamps are microseconds from ``baseTimeNanoseconds`` (Unix time, ns), as
recent Kineto versions write them.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from infertop import __version__
from infertop.config import Config
from infertop.errors import BadInputFile, UsageError
from infertop.export.jsonout import JsonStream
from infertop.export.oplayout import SELF_GAP_NS, _Node, _size, _tree, is_copy
from infertop.export.prelude import ExportResult, scan_recording
from infertop.model.events import OpWindow
from infertop.record.stream import RecordingStream
from infertop.trace.gpu import memcpy_kind

DEVICE, STREAM = 0, 7
LAUNCH_US = 5.0  # the synthetic cudaLaunchKernel's duration (within the op's own time)


class _Builder:
    def __init__(self, out: JsonStream, pid: int, tid: int, base_ns: int) -> None:
        self.out, self.pid, self.tid = out, pid, tid
        self.base_s = base_ns / 1e9
        self.ext = 0
        self.corr = 0
        self.events = 0
        self.gpu_cursor = 0
        self.copy_rate: dict[tuple[str, str], float] = {}
        self._first = True

    def ns(self, t: float) -> int:
        """Unix seconds as ns from the base: both ends of a range alike, so nesting is exact."""
        return round((t - self.base_s) * 1e9)

    def _ts(self, ns: int) -> float:
        return round(ns / 1000, 3)

    def emit(self, ev: dict[str, Any]) -> None:
        data = self.out.value(ev)
        self.out.write(data if self._first else b",\n" + data)
        self._first = False
        self.events += 1

    def window(self, w: OpWindow) -> None:
        # a copy's bytes: its kind's bytes in the window, shared out by time
        self.copy_rate = {
            (m.kind, m.host_memory): m.bytes / m.total_us for m in w.memcpy if m.total_us > 0
        }
        root = _tree(w)
        t = self.ns(w.t_start)
        for node in sorted(root.cpu.values(), key=lambda n: -n.total_us):
            _size(node)
            self._op(node, t)
            t += node.width
        for dev in sorted(root.device.values(), key=lambda n: -n.total_us):
            self._device(dev, self.ns(w.t_start), None, None)
        annotations: Counter[str] = Counter()
        for a in w.annotations:
            if a.t_end < a.t_start:
                continue
            self.ext += 1
            annotations[a.name] += 1
            self.emit(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": a.name,
                    "pid": self.pid,
                    "tid": a.tid,
                    "ts": self._ts(self.ns(a.t_start)),
                    "dur": round((self.ns(a.t_end) - self.ns(a.t_start)) / 1000, 3),
                    "args": {"External id": self.ext},
                }
            )

    def _op(self, node: _Node, t: int) -> None:
        self.ext += 1
        ext = self.ext
        args: dict[str, Any] = {"External id": ext, "calls": node.count}
        if node.shapes:
            args["Input Dims"] = node.shapes
        self.emit(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": node.name,
                "pid": self.pid,
                "tid": self.tid,
                "ts": self._ts(t),
                "dur": round(node.width / 1000, 3),
                "args": args,
            }
        )
        inner = t
        for child in sorted(node.cpu.values(), key=lambda n: -n.total_us):
            self._op(child, inner)
            inner += child.width
        if node.device:
            room = max(1, t + node.width - inner)
            launch = min(round(LAUNCH_US * 1000), max(1, room - 1), SELF_GAP_NS)
            for dev in sorted(node.device.values(), key=lambda n: -n.total_us):
                self._device(dev, inner, ext, (inner, launch))

    def _device(
        self, node: _Node, after: int, ext: int | None, launch: tuple[int, int] | None
    ) -> None:
        self.corr += 1
        corr = self.corr
        if launch is not None:
            self.emit(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel" if not is_copy(node.name) else "cudaMemcpyAsync",
                    "pid": self.pid,
                    "tid": self.tid,
                    "ts": self._ts(launch[0]),
                    "dur": round(launch[1] / 1000, 3),
                    "args": {"External id": ext, "correlation": corr},
                }
            )
            self.emit(
                {
                    "ph": "s",
                    "id": corr,
                    "pid": self.pid,
                    "tid": self.tid,
                    "ts": self._ts(launch[0]),
                    "cat": "ac2g",
                    "name": "ac2g",
                }
            )
        start = max(self.gpu_cursor, after)
        width = max(1, round(node.total_us * 1000))
        self.gpu_cursor = start + width
        name = node.name
        cat = (
            "gpu_memset"
            if name.lower().startswith("memset")
            else "gpu_memcpy"
            if is_copy(name)
            else "kernel"
        )
        args: dict[str, Any] = {
            "External id": ext if ext is not None else 0,
            "correlation": corr,
            "device": DEVICE,
            "stream": STREAM,
            "calls": node.count,
        }
        if cat != "kernel":
            rate = self.copy_rate.get(memcpy_kind(name)) if cat == "gpu_memcpy" else None
            if rate:
                args["bytes"] = round(rate * node.total_us)
        self.emit(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": DEVICE,
                "tid": STREAM,
                "ts": self._ts(start),
                "dur": round(width / 1000, 3),
                "args": args,
            }
        )
        if launch is not None:
            self.emit(
                {
                    "ph": "f",
                    "id": corr,
                    "pid": DEVICE,
                    "tid": STREAM,
                    "ts": self._ts(start),
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )


def export_kineto(path: str, out: str, config: Config, trace: bool) -> ExportResult:
    """``config`` is not read: the windows are written as the agent reduced them."""
    if trace:
        raise UsageError(
            f"{path} already is a torch.profiler trace",
            "open it as it is in TensorBoard or Holistic Trace Analysis",
        )
    stream = RecordingStream(path)
    t0, _rules, target = scan_recording(stream)
    pid = target.pid or 1
    # the ops' thread: the one the annotations are on most, else the process's main thread
    tids: Counter[int] = Counter()
    windows = 0
    gpu = False
    for ev in stream:
        if isinstance(ev, OpWindow):
            windows += 1
            gpu = gpu or bool(ev.kernels) or any(p.device == "cuda" for p in ev.paths)
            tids.update(a.tid for a in ev.annotations)
    if not windows:
        raise BadInputFile(
            f"{path} holds no torch-profiler windows",
            "record a process that has imported torch, without --no-inject, to get torch ops and kernels",
        )
    tid = tids.most_common(1)[0][0] if tids else pid
    doc = JsonStream(out)
    try:
        base_ns = int(t0 * 1e6) * 1000  # ts are µs from here: small, so exact to the ns
        head: dict[str, Any] = {
            "baseTimeNanoseconds": base_ns,
            "schemaVersion": 1,
            "distributedInfo": {"rank": 0, "world_size": 1},
            "traceName": f"infertop export of {path}",
            "displayTimeUnit": "ms",
        }
        if gpu:
            head["deviceProperties"] = [
                {"id": DEVICE, "name": "unknown (from an infertop recording)"}
            ]
        # spaced JSON here: Holistic Trace Analysis finds the rank with a regex wanting '"rank": 0'
        doc.write(json.dumps(head).encode()[:-1] + b', "traceEvents": [\n')
        b = _Builder(doc, pid, tid, base_ns)
        b.emit(
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "tid": 0,
                "ts": 0,
                "args": {"name": (target.cmdline or "python")[:120]},
            }
        )
        b.emit(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": pid,
                "tid": tid,
                "ts": 0,
                "args": {"name": f"thread {tid}"},
            }
        )
        if gpu:
            b.emit(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": DEVICE,
                    "tid": 0,
                    "ts": 0,
                    "args": {"name": "GPU 0"},
                }
            )
            b.emit(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": DEVICE,
                    "tid": STREAM,
                    "ts": 0,
                    "args": {"name": f"stream {STREAM}"},
                }
            )
        for ev in stream:
            if isinstance(ev, OpWindow):
                b.window(ev)
        doc.write(b'\n],"exporter":' + doc.value(f"infertop {__version__}") + b"}\n")
        doc.commit()
    except BaseException:
        doc.abort()
        raise
    return ExportResult(out, b.events, stream.warning)
