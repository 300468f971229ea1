"""Synthetic recordings for export and diff tests: what a real session writes, made small."""

from __future__ import annotations

from infertop.model.events import (
    AllocatorReading,
    Annotation,
    CollectorStatus,
    Frame,
    FrameDef,
    GpuActivity,
    KernelStat,
    Marker,
    MemcpyStat,
    OpPath,
    OpWindow,
    SampleWindow,
    StackDef,
    StageRules,
    StageSpan,
    TargetInfo,
    ThreadDef,
)
from infertop.model.gpu import GpuDeviceReading, GpuReading
from infertop.record.writer import RecordingWriter

T0 = 1_700_000_000.0
MAIN, WORKER = 101, 102
FRAMES = [
    Frame("<module>", "/srv/serve.py", 1),  # 0
    Frame("serve", "/srv/serve.py", 20),  # 1
    Frame("encode", "/srv/tokenizer.py", 5),  # 2 -> preprocess (tokenizer path)
    Frame("forward", "/srv/model.py", 40),  # 3 -> forward
    Frame("dumps", "/usr/lib/python3.11/json/__init__.py", 231),  # 4 -> serialize
    Frame("run", "/usr/lib/python3.11/threading.py", 982),  # 5
    Frame("Queue.get", "/usr/lib/python3.11/queue.py", 171),  # 6
    Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 320),  # 7
]
STACKS = [(0, 1, 2), (0, 1, 3), (0, 1, 4), (5, 6, 7)]
RULES = (("preprocess", "*tokenizer.py:encode"), ("forward", "*model.py:forward"))


def definitions() -> list:
    ev: list = [
        TargetInfo(4242, "python serve.py --port 8000", "3.11.7", "2.5.0", T0),
        StageRules(RULES),
        ThreadDef(MAIN, "MainThread"),
        ThreadDef(WORKER, "worker"),
        CollectorStatus(T0, "py-spy", "running", "100 Hz"),
        Marker(T0 + 0.01, "recording started"),
    ]
    ev += [FrameDef(i, f) for i, f in enumerate(FRAMES)]
    ev += [StackDef(i, s) for i, s in enumerate(STACKS)]
    return ev


def sample_window(
    t: float, counts: tuple[tuple[int, int, int], ...], ticks: int = 100
) -> SampleWindow:
    return SampleWindow(t, t + 1.0, 100.0, ticks, counts, 0, 0.0, 2)


def op_window(t: float, scale: float = 1.0) -> OpWindow:
    """A 0.25 s window: linear -> addmm launching a GEMM kernel; a pageable HtoD copy from to()."""
    return OpWindow(
        t,
        t + 0.25,
        "agent",
        500,
        False,
        paths=(
            OpPath(("aten::linear",), "forward", "cpu", 10, 900.0 * scale, 100.0),
            OpPath(("aten::linear", "aten::addmm"), "forward", "cpu", 10, 700.0 * scale, 650.0),
            OpPath(
                ("aten::linear", "aten::addmm", "sm80_xmma_gemm"),
                "forward",
                "cuda",
                10,
                2000.0 * scale,
                2000.0 * scale,
            ),
            OpPath(("aten::to",), "forward", "cpu", 5, 300.0, 50.0),
            OpPath(("aten::to", "aten::copy_"), "forward", "cpu", 5, 250.0, 250.0),
            OpPath(
                ("aten::to", "aten::copy_", "Memcpy HtoD (Pageable -> Device)"),
                "forward",
                "cuda",
                5,
                400.0,
                400.0,
            ),
        ),
        kernels=(
            KernelStat("sm80_xmma_gemm", "compute", 10, 2000.0 * scale, 150.0, 250.0),
            KernelStat("Memcpy HtoD (Pageable -> Device)", "memory", 5, 400.0, 70.0, 90.0),
        ),
        memcpy=(MemcpyStat("HtoD", "pageable", 5, 5 << 20, 400.0),),
        annotations=(
            Annotation("ProfilerStep#1", MAIN, t, t + 0.1 * scale),
            Annotation("ProfilerStep#2", MAIN, t + 0.1 * scale, t + 0.2 * scale),
            Annotation("my_region", MAIN, t + 0.05, t + 0.15),  # crosses the step boundary
        ),
        gpu=GpuActivity(2400.0 * scale, 250_000.0, 100_000.0),
    )


def gpu_reading(t: float) -> GpuReading:
    return GpuReading(
        t,
        (
            GpuDeviceReading(
                0,
                "NVIDIA A100",
                memory_used=10 << 30,
                memory_total=80 << 30,
                process_memory=8 << 30,
                util_gpu=37.0,
                util_memory=12.0,
                power_w=210.5,
            ),
        ),
    )


def session_events(seconds: int = 5, slow_encode: int = 0, scale: float = 1.0) -> list[list]:
    """Batches as a live session writes them: defs, then per second a sample window, spans,
    NVML and allocator readings, and an op window every other second."""
    batches = [definitions()]
    for k in range(seconds):
        t = T0 + 0.02 + k
        batch: list = [
            sample_window(
                t, ((MAIN, 0, 20 + slow_encode), (MAIN, 1, 50), (MAIN, 2, 10), (WORKER, 3, 90))
            ),
            StageSpan(MAIN, "preprocess", t, t + 0.2 + slow_encode / 100),
            StageSpan(MAIN, "forward", t + 0.3, t + 0.8),
            StageSpan(MAIN, "request", t, t + 0.9 + slow_encode / 100),  # encloses the two above
            StageSpan(MAIN, "batch", t + 0.5, t + 0.95),  # overlaps forward without nesting
            gpu_reading(t + 0.5),
            AllocatorReading(t + 0.5, 0, 2 << 30, 3 << 30, 2 << 30, 0, 0),
        ]
        if k % 2 == 0:
            batch.append(op_window(t + 0.1, scale))
        batches.append(batch)
    return batches


def write_session(path: str, seconds: int = 5, slow_encode: int = 0, scale: float = 1.0) -> str:
    w = RecordingWriter(path)
    for b in session_events(seconds, slow_encode, scale):
        w.write(b)
    w.close()
    return path


def write_busy(
    path: str, windows: int, threads: int = 8, stacks_per_thread: int = 12, depth: int = 10
) -> str:
    """A busy service, synthetic: every window, each thread in several distinct deep stacks
    (a realistic sample stream: shared prefixes, different leaves), plus an op window every
    ten windows. Exports to roughly 4 x threads x stacks_per_thread events per window."""
    w = RecordingWriter(path)
    frames = [
        Frame(f"f{d}_{k}", f"/srv/mod{k}.py", d + 1)
        for k in range(stacks_per_thread)
        for d in range(depth)
    ]
    defs: list = [TargetInfo(4242, "python busy.py", "3.11.7", "2.5.0", T0), StageRules(RULES)]
    defs += [ThreadDef(1000 + t, f"worker-{t}") for t in range(threads)]
    defs += [FrameDef(i, f) for i, f in enumerate(frames)]
    # stack k: the first half shared by every stack, the rest its own
    stacks = []
    for k in range(stacks_per_thread):
        shared = tuple(range(depth // 2))
        own = tuple(k * depth + d for d in range(depth // 2, depth))
        stacks.append(shared + own)
    defs += [StackDef(i, s) for i, s in enumerate(stacks)]
    w.write(defs)
    for i in range(windows):
        t = T0 + i
        counts = tuple(
            (1000 + th, (k + i + th) % stacks_per_thread, 1 + (k * 7 + i) % 5)
            for th in range(threads)
            for k in range(stacks_per_thread)
        )
        batch: list = [sample_window(t, counts)]
        if i % 10 == 0:
            batch.append(op_window(t + 0.1))
        w.write(batch)
    w.close()
    return path
