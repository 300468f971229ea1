"""Realistic torch-profiler windows (as the agent aggregates them) and their wire messages.

The workload: a GPU text model's forward (linear / attention / layer norm, a pageable input
copy), a blocking ``.item()`` in ``sync``, and sampling in ``postprocess``, called by request
batches. Numbers are shaped like an A100 trace: launch-bound small ops, big GEMM kernels.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from infertop.model.events import (
    AllocatorReading,
    Annotation,
    GpuActivity,
    KernelStat,
    MemcpyStat,
    OpPath,
    OpWindow,
    SyncStat,
)
from infertop.model.fields import op_window_fields

MAIN_TID = 140001


@dataclass
class Op:
    """A torch op with its own CPU time per call, child ops and the device work it launches."""

    name: str
    self_us: float
    calls: int = 1  # per call of the parent
    children: list[Op] = field(default_factory=list)
    kernels: list[tuple[str, str, float]] = field(default_factory=list)  # name, kind, µs/call
    shapes: str | None = None


GEMM = "ampere_sgemm_128x64_tn"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>"
LN = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
GELU = "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>"
H2D = "Memcpy HtoD (Pageable -> Device)"
D2H = "Memcpy DtoH (Device -> Pageable)"


LAYERS = 4
QKV = "[[16, 512, 1024], [3072, 1024]]"
FORWARD = [
    Op("aten::to", 4, children=[Op("aten::_to_copy", 6, children=[Op("aten::copy_", 9, kernels=[(H2D, "memory", 42)])])], shapes="[[16, 512]]"),  # noqa: E501
    Op("aten::embedding", 8, children=[Op("aten::index_select", 11, kernels=[("indexSelectLargeIndex", "compute", 9)])]),  # noqa: E501
    Op("aten::layer_norm", 5, calls=2 * LAYERS, children=[Op("aten::native_layer_norm", 12, kernels=[(LN, "compute", 7)])], shapes="[[16, 512, 1024], [1024]]"),  # noqa: E501
    Op("aten::scaled_dot_product_attention", 7, calls=LAYERS, children=[Op("aten::_scaled_dot_product_flash_attention", 19, kernels=[(FLASH, "compute", 260)])], shapes="[[16, 16, 512, 64]]"),  # noqa: E501
    Op("aten::gelu", 9, calls=LAYERS, kernels=[(GELU, "compute", 21)], shapes="[[16, 512, 4096]]"),
    Op("aten::linear", 6, calls=3 * LAYERS, children=[Op("aten::t", 3), Op("aten::addmm", 14, kernels=[(GEMM, "compute", 180)], shapes=QKV)], shapes=QKV),  # noqa: E501
]
SYNC = [Op("aten::item", 5, children=[Op("aten::_local_scalar_dense", 8, kernels=[(D2H, "memory", 4)])])]  # noqa: E501
POST = [
    Op("aten::softmax", 6, children=[Op("aten::_softmax", 9, kernels=[("softmax_warp_forward", "compute", 14)])]),  # noqa: E501
    Op("aten::topk", 18, kernels=[("gatherTopK", "compute", 31)]),
    Op("aten::argmax", 11, kernels=[("reduce_kernel", "compute", 6)]),
]
STAGES = {"forward": FORWARD, "sync": SYNC, "postprocess": POST}
COPY_BYTES = {H2D: 16 * 512 * 8, D2H: 8}


def _walk(op: Op, prefix: tuple[str, ...], stage: str, calls: int, jitter: float, out: dict) -> float:
    """Add ``op``'s paths to ``out`` (key: names, device); return its total CPU µs."""
    n = calls * op.calls
    names = (*prefix, op.name)
    self_us = op.self_us * n * jitter
    total = self_us + sum(_walk(c, names, stage, n, jitter, out) for c in op.children)
    out[(names, "cpu")] = OpPath(names, stage, "cpu", n, total, self_us, op.shapes)
    for kname, _kind, us in op.kernels:
        t = us * n * jitter
        out[((*names, kname), "cuda")] = OpPath((*names, kname), stage, "cuda", n, t, t, None)
    return total


def make_op_window(
    rng: random.Random, t_start: float, window_s: float = 0.5, batches: int = 8, gpu: bool = True
) -> OpWindow:
    """One window covering ``batches`` request batches."""
    paths: dict = {}
    jitter = rng.uniform(0.85, 1.2)
    for stage, ops in STAGES.items():
        for op in ops:
            _walk(op, (), stage, batches, jitter, paths)
    device = [p for p in paths.values() if p.device == "cuda"]
    ks: dict[str, list[float]] = {}
    kinds = {k: kind for st in STAGES.values() for top in st for k, kind in _kernels_of(top)}
    for p in device:
        row = ks.setdefault(p.names[-1], [0, 0.0])
        row[0] += p.count
        row[1] += p.total_us
    kernel_stats = tuple(
        KernelStat(name, kinds[name], int(c), t, 0.8 * t / c, 1.4 * t / c) for name, (c, t) in ks.items()
    )
    memcpy = tuple(
        MemcpyStat(
            "HtoD" if name == H2D else "DtoH", "pageable", int(ks[name][0]),
            int(ks[name][0]) * COPY_BYTES[name], ks[name][1],
        )  # fmt: skip
        for name in (H2D, D2H)
    )
    syncs = (SyncStat("cudaStreamSynchronize", batches, 850.0 * jitter),)
    span = window_s * 1e6
    busy = sum(k.total_us for k in kernel_stats)
    annotations = tuple(
        Annotation("infertop:forward", MAIN_TID, t_start + i * window_s / batches,
                   t_start + (i + 0.6) * window_s / batches)
        for i in range(batches)
    )  # fmt: skip
    if not gpu:
        return OpWindow(
            t_start, t_start + window_s, "agent", 40 * len(paths), False,
            tuple(p for p in paths.values() if p.device == "cpu"), annotations=annotations,
        )  # fmt: skip
    return OpWindow(
        t_start, t_start + window_s, "agent", 60 * len(paths), False, tuple(paths.values()),
        kernel_stats, memcpy, syncs, annotations,
        GpuActivity(min(busy, span), span, 0.012 * span),
    )  # fmt: skip


def _kernels_of(op: Op) -> list[tuple[str, str]]:
    out = [(k, kind) for k, kind, _ in op.kernels]
    for c in op.children:
        out += _kernels_of(c)
    return out


def make_allocator(t: float, step: int = 0) -> AllocatorReading:
    gib = 1 << 30
    return AllocatorReading(t, 0, int(6.2 * gib) + step * (1 << 20), 9 * gib, int(7.8 * gib), 0, 0)


# -- the wire (docs/agent-protocol.md) --------------------------------------------------------
def window_message(w: OpWindow, seq: int = 0) -> dict[str, Any]:
    """The agent's ``window`` message for ``w``: its fields by name, without the ``source`` and
    ``pid`` that the client adds."""
    fields = op_window_fields(w)
    del fields["source"]
    fields.pop("pid", None)
    return {"v": 1, "type": "window", "seq": seq, **fields}


def allocator_message(r: AllocatorReading) -> dict[str, Any]:
    return {
        "v": 1, "type": "allocator", "t": r.t, "device": r.device, "allocated": r.allocated,
        "reserved": r.reserved, "peak_allocated": r.peak_allocated,
        "alloc_retries": r.alloc_retries, "ooms": r.ooms,
    }  # fmt: skip
