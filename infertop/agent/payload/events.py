"""The event tuple the window reduction works on, and how its names are classified."""

from __future__ import annotations

import re

# One event is a tuple:
#   (kind, name, tid, start_ns, dur_ns, ident, link, nbytes, shapes)
# kind    Kineto activity type: cpu_op, user_annotation, kernel, gpu_memcpy, gpu_memset,
#         cuda_runtime, cuda_driver, cuda_sync, or memory: an allocation (nbytes > 0) or a
#         free (< 0) the allocator reported, a window with profile_memory (others are ignored)
# tid     OS thread id for CPU events, stream for GPU events
# start_ns unix time in ns; dur_ns duration in ns
# ident   the event's own id: a CPU op's correlation id ("External id" in trace files); for
#         runtime calls and GPU work the CUDA correlation id that pairs a launch with its work
# link    for runtime calls and GPU events: the ident of the CPU op that launched them (0: none);
#         only a fallback: runtime calls are placed under ops by time on their thread, GPU work
#         under the op of the runtime call with the same correlation id
# nbytes  bytes moved by a memcpy / set by a memset, allocated (freed: < 0) by a memory event
#         (0 otherwise)
# shapes  short input-shape string of a CPU op (None unless record_shapes); a memory
#         event's device: "cpu" or "cuda"

EV_KIND, EV_NAME, EV_TID, EV_START, EV_DUR, EV_ID, EV_LINK, EV_BYTES, EV_SHAPES = range(9)

CPU_KINDS = frozenset(("cpu_op", "user_annotation"))
GPU_KINDS = frozenset(("kernel", "gpu_memcpy", "gpu_memset"))
RUNTIME_KINDS = frozenset(("cuda_runtime", "cuda_driver"))
MEMORY_KIND = "memory"
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
