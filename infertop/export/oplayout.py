"""The agent's torch-profiler windows as slices: ops, the kernels and copies they launched, and
flow arrows between them.

A window is an aggregate (time per op call path, not a list of calls), so each window is drawn
as its call tree laid out from the window's start like a flame graph: a slice's width is the
total time of that call path in the window (``count`` calls), children sit inside their parent,
siblings follow each other, largest first. Device work launched by an op is drawn on the GPU
tracks (kernels; memcpy/memset) after it, with an arrow from the op. Windows never overlap on a
track: a window whose layout is longer than the gap to the next one pushes that one along.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from infertop.export.jsonout import us as _us
from infertop.model.events import OpWindow

Emit = Callable[[dict], None]
SELF_GAP_NS = 1000  # room kept in an op that launched device work, for the arrow's tail


@dataclass
class _Node:
    name: str
    count: int = 0
    total_us: float = 0.0
    self_us: float = 0.0
    stage: str | None = None
    shapes: str | None = None
    cpu: dict[str, _Node] = field(default_factory=dict)
    device: dict[str, _Node] = field(default_factory=dict)
    width: int = 0


def _tree(w: OpWindow) -> _Node:
    root = _Node("")
    for p in w.paths:
        if not p.names:
            continue
        node = root
        last = len(p.names) - 1
        for i, name in enumerate(p.names):
            kids = node.device if (i == last and p.device == "cuda") else node.cpu
            nxt = kids.get(name)
            if nxt is None:
                nxt = kids[name] = _Node(name)
            node = nxt
        node.count += p.count
        node.total_us += p.total_us
        node.self_us += p.self_us
        node.stage = node.stage or p.stage
        node.shapes = node.shapes or p.shapes
    return root


def _size(node: _Node) -> int:
    inner = sum(_size(c) for c in node.cpu.values())
    need = inner + (SELF_GAP_NS if node.device else 0)
    node.width = max(need, round(node.total_us * 1000), 1)
    return node.width


def is_copy(name: str) -> bool:
    return name.startswith(("Memcpy", "Memset", "memcpy", "memset"))


class OpLayout:
    """Emits each window's op tree on ``ops_track`` and its device work on the GPU tracks."""

    def __init__(
        self,
        emit: Emit,
        pid: int,
        ops_track: int,
        gpu_pid: int,
        kernel_track: int,
        copy_track: int,
        ns: Callable[[float], int],
    ) -> None:
        self.emit, self.pid, self.ops_track = emit, pid, ops_track
        self.gpu_pid, self.kernel_track, self.copy_track, self.ns = (
            gpu_pid,
            kernel_track,
            copy_track,
            ns,
        )
        self.cursor = 0  # ns: the ops track is free from here
        self.gpu_cursor = {kernel_track: 0, copy_track: 0}
        self.flow_id = 0
        self.slices = 0
        self.device_slices = 0

    def window(self, w: OpWindow) -> None:
        root = _tree(w)
        start = max(self.ns(w.t_start), self.cursor)
        t = start
        roots = sorted(root.cpu.values(), key=lambda n: -n.total_us)
        for node in roots:
            _size(node)
            self._op(node, t)
            t += node.width
        self.cursor = t
        for node in sorted(root.device.values(), key=lambda n: -n.total_us):  # launched elsewhere
            self._device(node, start, None)

    def _op(self, node: _Node, t: int) -> None:
        args: dict = {
            "calls": node.count,
            "total_us": round(node.total_us, 3),
            "self_us": round(node.self_us, 3),
        }
        if node.stage:
            args["stage"] = node.stage
        if node.shapes:
            args["shapes"] = node.shapes
        self.emit(
            {
                "ph": "X",
                "pid": self.pid,
                "tid": self.ops_track,
                "ts": _us(t),
                "dur": _us(node.width),
                "name": node.name,
                "cat": "torch op",
                "args": args,
            }
        )
        self.slices += 1
        inner = t
        for child in sorted(node.cpu.values(), key=lambda n: -n.total_us):
            self._op(child, inner)
            inner += child.width
        if node.device:
            tail = inner + (t + node.width - inner) // 2
            for dev in sorted(node.device.values(), key=lambda n: -n.total_us):
                self._device(dev, tail, tail)

    def _device(self, node: _Node, after: int, flow_from: int | None) -> None:
        track = self.copy_track if is_copy(node.name) else self.kernel_track
        t = max(self.gpu_cursor[track], after)
        width = max(round(node.total_us * 1000), 1)
        self.gpu_cursor[track] = t + width
        self.emit(
            {
                "ph": "X",
                "pid": self.gpu_pid,
                "tid": track,
                "ts": _us(t),
                "dur": _us(width),
                "name": node.name,
                "cat": "gpu copy" if track == self.copy_track else "gpu kernel",
                "args": {"calls": node.count, "total_us": round(node.total_us, 3)},
            }
        )
        self.device_slices += 1
        if flow_from is not None:
            self.flow_id += 1
            self.emit(
                {
                    "ph": "s",
                    "id": self.flow_id,
                    "pid": self.pid,
                    "tid": self.ops_track,
                    "ts": _us(flow_from),
                    "name": "launch",
                    "cat": "launch",
                }
            )
            self.emit(
                {
                    "ph": "f",
                    "bp": "e",
                    "id": self.flow_id,
                    "pid": self.gpu_pid,
                    "tid": track,
                    "ts": _us(t),
                    "name": "launch",
                    "cat": "launch",
                }
            )
