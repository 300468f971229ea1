"""The events that flow from collectors to the session (and into recordings).

Events are small frozen dataclasses. Stacks are interned: a ``SampleWindow`` refers to stack ids,
and ``FrameDef`` / ``StackDef`` events define ids the first time they are used, so a recording is
just the event stream written in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infertop.model.engine import EngineStats
from infertop.model.gpu import GpuReading
from infertop.model.host_memory import HostMemoryReading, ObjectCensus
from infertop.model.torch_memory import OpMemory


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame: function (qualified name), file path and current line."""

    function: str
    file: str
    line: int

    @property
    def short_file(self) -> str:
        """The last two path components: enough to recognise, short enough to show."""
        parts = self.file.replace("\\", "/").rsplit("/", 2)
        return "/".join(parts[-2:]) if len(parts) > 1 else self.file

    def label(self) -> str:
        return f"{self.function} ({self.short_file}:{self.line})"


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """What we know about the process under observation.

    A later ``TargetInfo`` for the same pid only fills in: the session keeps known fields where
    the new one has None (the agent's hello adds the torch version this way).
    """

    pid: int | None
    cmdline: str | None = None
    python: str | None = None
    torch: str | None = None
    started: float = 0.0  # unix time the session began


@dataclass(frozen=True, slots=True)
class FrameDef:
    frame_id: int
    frame: Frame


@dataclass(frozen=True, slots=True)
class StackDef:
    """Stack ``stack_id`` is ``frames`` (frame ids, root first)."""

    stack_id: int
    frames: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ThreadDef:
    tid: int
    name: str
    pid: int = 0  # the process it belongs to, with --children (1.3); 0: the target


@dataclass(frozen=True, slots=True)
class ProcessDef:
    """A process followed with ``--children`` (1.3): the target itself has ``ppid`` 0."""

    pid: int
    ppid: int
    cmdline: str


@dataclass(frozen=True, slots=True)
class SampleWindow:
    """Active-thread samples gathered over [t_start, t_end) (unix seconds).

    ``counts`` holds (thread id, stack id, sample count). ``ticks`` is how many times the sampler
    looked at the process. A *CPU window* (``idle`` false) holds active samples only, so idle
    thread time is ``ticks * threads - active samples``; a *wall window* (``idle`` true, py-spy
    ``--idle``) holds every thread's stack at every tick, idle or not, with nothing to say which
    (docs/stages.md, "Wall and CPU").
    """

    t_start: float
    t_end: float
    rate_hz: float
    ticks: int
    counts: tuple[tuple[int, int, int], ...]
    errors: int = 0
    lag_s: float = 0.0
    threads: int = 0  # Python threads alive during the window; 0 if unknown
    idle: bool = False  # a wall window: idle threads' samples are in ``counts`` too


def window_ticks(w: SampleWindow) -> int:
    """The samples per thread a window stands for: its ticks, or from its length and rate when
    the recording did not say."""
    return w.ticks if w.ticks > 0 else max(1, round((w.t_end - w.t_start) * (w.rate_hz or 100)))


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    """Health of one collector, shown in the status line: lag and errors are data, not crashes."""

    t: float
    collector: str
    state: str  # "running" | "stopped" | "unavailable" | "failed"
    message: str = ""


@dataclass(frozen=True, slots=True)
class StageSpan:
    """One call of a stage with known boundaries (annotations, agent-timed functions)."""

    tid: int
    stage: str
    t_start: float
    t_end: float
    request: str | None = None  # ``infertop.stage(..., request=ID)``: the request it is of
    #: the leading dimension of a forward call's input (the agent's: its first tensor argument,
    #: its ``input_ids``, or the length of a list of requests); None: not known
    batch: int | None = None


@dataclass(frozen=True, slots=True)
class TargetExited:
    t: float
    reason: str = "the target process exited"


@dataclass(frozen=True, slots=True)
class Marker:
    """A note on the timeline (recording started, paused, user mark)."""

    t: float
    text: str
    extra: dict[str, str] = field(default_factory=dict)


#: a merged recording's ``Marker`` texts: one ``MERGED_INPUT`` per input (its host, pids), and
#: ``MERGED`` once at the head (record/merge.py writes them; process roles and GPU groups read)
MERGED_INPUT = "merged input"
MERGED = "recordings merged"
#: the prefix of the ``Marker`` that ``watch`` puts at an incident's trigger moment
#: ("incident: forward.p99 312 ms > 250 ms"; its extras: trigger, before_s, after_s)
INCIDENT = "incident: "


@dataclass(frozen=True, slots=True)
class StageRules:
    """The user's stage rules at record time, so a recording reads the way it was seen."""

    rules: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class OpPath:
    """Torch ops aggregated by call path (outermost first) in one window.

    A ``cuda`` path ends in the kernel or copy the op launched; its times are device time.
    """

    names: tuple[str, ...]
    stage: str
    device: str  # "cpu" | "cuda"
    count: int
    total_us: float
    self_us: float
    shapes: str | None = None


@dataclass(frozen=True, slots=True)
class KernelStat:
    name: str
    kind: str  # "compute" | "memory" | "communication"
    count: int
    total_us: float
    min_us: float
    max_us: float


@dataclass(frozen=True, slots=True)
class MemcpyStat:
    kind: str  # "HtoD" | "DtoH" | "DtoD" | "HtoH" | "memset"
    host_memory: str  # "pageable" | "pinned" | "device" | "unknown"
    count: int
    bytes: int
    total_us: float


@dataclass(frozen=True, slots=True)
class SyncStat:
    name: str
    count: int
    total_us: float


@dataclass(frozen=True, slots=True)
class Annotation:
    """A ``record_function`` range (unix seconds)."""

    name: str
    tid: int
    t_start: float
    t_end: float


@dataclass(frozen=True, slots=True)
class GpuActivity:
    busy_us: float
    span_us: float
    max_gap_us: float


@dataclass(frozen=True, slots=True)
class OpTime:
    """The op thread's time in a window: its top-level ops, grouped into stretches of model
    work (ops less than the agent's ``OP_GAP_NS`` apart); ``wall_us`` is the stretches' length,
    ``in_ops_us`` the part under an op: the rest is Python and dispatch between ops.
    ``run_us`` / ``wait_us``: the op thread's time on a CPU and waiting on a run queue for one
    over the window, by the kernel's count (None: not measured: older agents, traces)."""

    ops: int
    in_ops_us: float
    wall_us: float
    run_us: float | None = None
    wait_us: float | None = None

    @property
    def waited(self) -> float | None:
        """The op thread's share of its runnable time spent waiting for a CPU; None unmeasured."""
        if self.run_us is None or self.wait_us is None:
            return None
        return waited_share(self.run_us, self.wait_us)


def waited_share(run: float, wait: float) -> float | None:
    """Of a runnable time (``run`` on a CPU, ``wait`` on a run queue), the share spent waiting;
    None where there was none."""
    return wait / (run + wait) if run + wait > 0 else None


@dataclass(frozen=True, slots=True)
class CpuWait:
    """The kernel's account of one process's threads over [t_start, t_end) (unix s): ``run_ns``
    on a CPU, ``wait_ns`` runnable but waiting on a run queue for one (``/proc/PID/task/TID/
    schedstat``, read outside the target as each sample window ends). The one reading of CPU
    contention that the findings, the straggler rule and the triggers share
    (analysis/cpu_contention.py)."""

    t_start: float
    t_end: float
    pid: int
    run_ns: int
    wait_ns: int


@dataclass(frozen=True, slots=True)
class OpWindow:
    """One torch.profiler window over [t_start, t_end) (unix s), aggregated; durations in µs."""

    t_start: float
    t_end: float
    source: str  # "agent" | "kineto"
    events: int
    truncated: bool
    paths: tuple[OpPath, ...] = ()
    kernels: tuple[KernelStat, ...] = ()
    memcpy: tuple[MemcpyStat, ...] = ()
    syncs: tuple[SyncStat, ...] = ()
    annotations: tuple[Annotation, ...] = ()
    gpu: GpuActivity | None = None
    op_time: OpTime | None = None  # None: not measured (older agents and recordings)
    #: the process the window is of (1.4): 0 is the target; a child with ``--children``, a
    #: rank of an imported Kineto directory, a process of a merged recording
    pid: int = 0
    #: what the allocator reported (a model call profiled with ``profile_memory``); None: not
    #: profiled so (other windows, agents before it, older recordings)
    memory: OpMemory | None = None


@dataclass(frozen=True, slots=True)
class AllocatorReading:
    """The CUDA caching allocator's statistics for one device (bytes)."""

    t: float
    device: int
    allocated: int
    reserved: int
    peak_allocated: int
    alloc_retries: int
    ooms: int
    pid: int = 0  # the process (1.4), as ``OpWindow.pid``


@dataclass(frozen=True, slots=True)
class GcPause:
    """One garbage collection in the target, timed by the agent (``gc.callbacks``): on thread
    ``tid`` over [t_start, t_end] (unix s), of ``generation`` (0-2), freeing ``collected``."""

    t_start: float
    t_end: float
    generation: int
    collected: int
    tid: int
    pid: int = 0  # the process, as ``OpWindow.pid``


@dataclass(frozen=True, slots=True)
class LoopLag:
    """One heartbeat on a running asyncio event loop (the loop's thread ``tid``): scheduled at
    ``t`` (unix s), it ran ``lag_s`` later."""

    t: float
    lag_s: float
    tid: int
    pid: int = 0


@dataclass(frozen=True, slots=True)
class CallSamples:
    """Stacks of the threads inside stage calls, each with its time (the agent's call sampler,
    ``rate_hz`` a second): ``samples`` holds (thread id, unix time, stack id), in time order.
    Joined to the stage spans, they say where a given call spent its time (tail attribution)."""

    rate_hz: float
    samples: tuple[tuple[int, float, int], ...]
    #: [t_start, t_end] (unix s) when the target's threads waited GIL_LATE_S or more for a GIL
    #: held without a switch (a C call keeping it): the agent's thread woke that late, not for
    #: want of a CPU, while two or more of the target's threads ran (docs/agent-protocol.md;
    #: agents before ``cpu_waits`` sent every late wake-up of their own thread, for any cause)
    gil_waits: tuple[tuple[float, float], ...] = ()
    pid: int = 0


@dataclass(frozen=True, slots=True)
class GenerationCall:
    """One generation call (Hugging Face ``generate``, or a loop named with ``--generate``),
    timed by the agent on thread ``tid`` over [t_start, t_end] (unix s). ``t_first``: its first
    new token chosen (None: not seen). ``batch`` and ``prompt_tokens``: the leading and second
    dimensions of its input ids (padded); ``new_tokens`` per sequence; ``kv_bytes``: the keys and
    values its cache held at the end, on ``kv_device``; ``forwards``: the model's forward calls
    inside it. None where unknown."""

    tid: int
    t_start: float
    t_first: float | None
    t_end: float
    batch: int | None = None
    prompt_tokens: int | None = None
    new_tokens: int | None = None
    kv_bytes: int | None = None
    kv_device: str | None = None
    forwards: int = 0
    pid: int = 0  # the process, as ``OpWindow.pid``


Event = (
    TargetInfo
    | FrameDef
    | StackDef
    | ThreadDef
    | ProcessDef
    | SampleWindow
    | CollectorStatus
    | StageSpan
    | TargetExited
    | Marker
    | StageRules
    | OpWindow
    | AllocatorReading
    | GpuReading
    | GcPause
    | LoopLag
    | CallSamples
    | GenerationCall
    | HostMemoryReading
    | CpuWait
    | ObjectCensus
    | EngineStats
)
