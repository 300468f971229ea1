"""Counters and instant events of the Chrome export of a recording: threads by stage, the
profiler windows' GPU busy share, the CUDA allocator and NVML readings, and findings."""

from __future__ import annotations

from collections.abc import Callable

from infertop.analysis.stages import StageClassifier
from infertop.export.chrome.chunk_findings import ChunkFindings
from infertop.export.jsonout import us
from infertop.model.events import AllocatorReading, OpWindow, SampleWindow
from infertop.model.findings import Finding
from infertop.model.gpu import GpuReading

MIB = 1 << 20
Emit = Callable[[dict], None]
Ns = Callable[[float], int]


def stage_counter(
    emit: Callable[[dict], None],
    pid: int,
    w: SampleWindow,
    ns: Callable[[float], int],
    classifier: StageClassifier,
    frames: list,
    stacks: list,
) -> None:
    """Threads busy in each stage, on average over the window."""
    if w.ticks <= 0:
        return
    per: dict[str, float] = {}
    for _tid, sid, n in w.counts:
        if 0 <= sid < len(stacks):
            st = classifier.stage_of(sid, [frames[f] for f in stacks[sid]])
            per[st] = per.get(st, 0.0) + n / w.ticks
    if per:
        emit(
            {
                "ph": "C",
                "pid": pid,
                "tid": 0,
                "ts": us(ns(w.t_start)),
                "name": "threads by stage",
                "args": {k: round(v, 4) for k, v in sorted(per.items())},
            }
        )


def window_counters(
    emit: Callable[[dict], None], gpu_pid: int, w: OpWindow, ns: Callable[[float], int]
) -> None:
    if w.gpu is not None and w.gpu.span_us > 0:
        busy = 100.0 * w.gpu.busy_us / w.gpu.span_us
        emit(
            {
                "ph": "C",
                "pid": gpu_pid,
                "tid": 0,
                "ts": us(ns(w.t_start)),
                "name": "GPU busy in profiler window (%)",
                "args": {"busy": round(busy, 3)},
            }
        )
        emit(
            {
                "ph": "C",
                "pid": gpu_pid,
                "tid": 0,
                "ts": us(ns(w.t_end)),
                "name": "GPU busy in profiler window (%)",
                "args": {"busy": 0},
            }
        )


def allocator(
    emit: Callable[[dict], None], gpu_pid: int, a: AllocatorReading, ns: Callable[[float], int]
) -> None:
    emit(
        {
            "ph": "C",
            "pid": gpu_pid,
            "tid": 0,
            "ts": us(max(0, ns(a.t))),
            "name": f"CUDA allocator cuda:{a.device} (MiB)",
            "args": {
                "allocated": round(a.allocated / MIB, 3),
                "reserved": round(a.reserved / MIB, 3),
                "peak allocated": round(a.peak_allocated / MIB, 3),
            },
        }
    )
    if a.alloc_retries or a.ooms:
        emit(
            {
                "ph": "C",
                "pid": gpu_pid,
                "tid": 0,
                "ts": us(max(0, ns(a.t))),
                "name": f"CUDA allocator cuda:{a.device} retries and OOMs",
                "args": {"retries": a.alloc_retries, "ooms": a.ooms},
            }
        )


NVML_COUNTERS = (
    (
        "utilization (%)",
        (
            ("gpu", "util_gpu", 1),
            ("memory", "util_memory", 1),
            ("sm (GPM)", "sm_util", 1),
            ("dram bandwidth (GPM)", "dram_bw_util", 1),
            ("tensor (GPM)", "tensor_util", 1),
        ),
    ),
    (
        "memory (MiB)",
        (
            ("used", "memory_used", MIB),
            ("target", "process_memory", MIB),
            ("total", "memory_total", MIB),
        ),
    ),
    ("PCIe (MB/s)", (("tx", "pcie_tx_kbs", 1000), ("rx", "pcie_rx_kbs", 1000))),
    ("NVLink (MB/s)", (("tx", "nvlink_tx_kbs", 1000), ("rx", "nvlink_rx_kbs", 1000))),
    ("clocks (MHz)", (("sm", "sm_clock_mhz", 1), ("memory", "mem_clock_mhz", 1))),
    ("power (W)", (("power", "power_w", 1),)),
    ("temperature (C)", (("temperature", "temperature_c", 1),)),
)


def nvml(
    emit: Callable[[dict], None], group: Callable[[int], int], r: GpuReading, ns: Callable[[float], int]
) -> None:
    """Each device's readings as counters in ``group(device index)``'s track group."""
    ts = us(max(0, ns(r.t)))
    for d in r.devices:
        gpu_pid = group(d.index)
        for title, fields in NVML_COUNTERS:
            args = {}
            for key, attr, div in fields:
                v = getattr(d, attr)
                if v is not None:
                    args[key] = round(v / div, 3)
            if args:
                emit(
                    {
                        "ph": "C",
                        "pid": gpu_pid,
                        "tid": 0,
                        "ts": ts,
                        "name": f"GPU{d.index} {title}",
                        "args": args,
                    }
                )


def findings(
    emit: Callable[[dict], None], pid: int, chunk: ChunkFindings, ns: Callable[[float], int]
) -> None:
    for f in chunk.findings:
        emit(finding_event(f, pid, us(max(0, ns(chunk.t_start))),
                           over_s=[round(chunk.t_start, 3), round(chunk.t_end, 3)]))  # fmt: skip


def finding_event(f: Finding, pid: int, ts: float, **extra: object) -> dict:
    """A finding as a global instant event: severity, rule and title in the name, the rest in
    its args."""
    return {
        "ph": "i",
        "s": "g",
        "pid": pid,
        "tid": 0,
        "ts": ts,
        "name": f"[{f.severity}] {f.rule}: {f.title}",
        "cat": "finding",
        "args": {"rule": f.rule, "severity": f.severity, "where": list(f.where), "hint": f.hint,
                 "evidence": f.evidence, **extra},  # fmt: skip
    }
