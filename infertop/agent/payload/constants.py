"""The agent's names, defaults and measured limits (shared by every part of the payload)."""

from __future__ import annotations

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
    # functions that are generation calls (a hand-written decode loop; ``--generate``), as
    # ``FILE_GLOB:FUNC_GLOB`` patterns; Hugging Face ``generate`` is known without them
    "generate_functions": [],
    # stacks of the threads inside stage calls, per second (tail attribution; 0: off)
    "call_sample_hz": 100.0,
    "pauses": True,  # garbage collections and asyncio event-loop lag
    # time the entry points the agent knows (an ASGI app's requests: stages.KNOWN_ENTRY_POINTS)
    "known_entry_points": True,
    # every other window is one model call profiled with profile_memory (window._MemoryCall):
    # the bytes its ops and stages allocate and its peak (docs/agent-protocol.md)
    "profile_memory": False,
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
    "max_events": (1000, 100000),
    "call_sample_hz": (0.0, 1000.0),  # a window's stop cost grows with its events (~5 µs each)
}
#: The first window after start also measures the event rate (a window's cost grows with its
#: event count, so later windows are shortened to stay under max_events).
PROBE_WINDOW_S = MIN_WINDOW_S
MAX_PATH_ROWS = 4000
MAX_ANNOTATIONS = 2000
MAX_KERNEL_ROWS = 2000
MAX_MEMORY_OP_ROWS = 200  # a window's ops by bytes allocated (profile_memory)
#: a memory call (profile_memory) waits this long for an nn.Module call to begin, and gives up
#: on one that has not ended this long after it began
MEMORY_CALL_WAIT_S = 2.0
MEMORY_CALL_MAX_S = 30.0
MAX_SPANS_BUFFERED = 50000
#: op_time: top-level ops on a thread less than this apart belong to one stretch of model work
#: (the gap is Python and dispatch); a longer gap is another stage or waiting (measured on the
#: samples: Python between ops is 1-60 us, tokenizer / JSON / queue gaps are milliseconds)
OP_GAP_NS = 1000000
SPAN_FLUSH_S = 0.5
MAX_STAGE_FUNCTIONS = 1000  # functions the stage rules may have timed (sys.monitoring)
#: how often the agent looks at the threads' stacks for a model's forward it does not time yet
#: (a model in a frozen heap, or built after the configuration): one ``sys._current_frames()``
#: and a walk of the stacks' code objects, ~30 us for 10 threads (0.03 % of a core at 10 Hz);
#: often enough to catch a forward that runs a few percent of the time within seconds
MODEL_SCAN_S = 0.1
#: ... and in a process that has not imported torch, a look a second for it
MODEL_SCAN_IDLE_S = 1.0
ALLOCATOR_EVERY_S = 1.0
#: the object census (memory.py, ``object_census``): what grows in the target's heap, by type
#: and by its largest containers. The first one this long after start, then one each
#: CENSUS_EVERY_S or, on a heap where one costs more, as often as CENSUS_BUDGET of a core
#: allows (measured: ~0.1 us per object tracked by the GC on the agent's thread, which gives
#: the GIL up at the switch interval; gc.get_objects alone holds it ~10 ns per object)
CENSUS_FIRST_S = 2.0
CENSUS_EVERY_S = 10.0
CENSUS_BUDGET = 0.005
CENSUS_TYPES = 30  # the most numerous types sent
CENSUS_CONTAINERS = 20  # the longest lists, dicts, sets and deques sent
CENSUS_MIN_LEN = 100  # shorter containers are not followed
CENSUS_ITEMS_SIZED = 16  # items of a container whose sizes estimate its bytes
#: a list's items are read from a copy (gc.get_referents) only up to this length (8 MB)
CENSUS_LIST_ITEMS_READ = 1_000_000
CENSUS_NAME_ENTRIES = 200000  # module globals (and their objects' attributes) read for names
#: no census on a heap of more blocks than this (sys.getallocatedblocks): each of its reads
#: of the heap holds the GIL at once (safe_reads.py), ~0.12 us per tracked object, and a
#: heap of 2 million blocks holds ~0.6 million (torch and transformers: 0.7 M blocks, 0.2 M)
CENSUS_MAX_BLOCKS = 2000000
#: ... and none after one whose longest read held the GIL longer than this at once
CENSUS_MAX_HOLD_S = 0.05
SEND_TIMEOUT_S = 5.0
KINETO_QUIET_LEVEL = 6  # above every libkineto level (VERBOSE 0 ... USDT 5)
C10_QUIET_LEVEL = 2  # c10's LOG threshold while a window stops: errors only (INFO 0, WARNING 1)
#: Between removing the profiler's op callbacks and finalising the window. torch 2.13 with
#: profile_all_threads: a thread inside an op while the profiler finalises may write to freed
#: per-thread queues (SIGSEGV in ThreadLocalSubqueue::begin_op, seen under load, about one per
#: 1,700 windows of 0.3 s); with the callbacks removed first and this pause, none in 3,900
#: (tests/agent/stress_profiler_stop.py, docs/agent-protocol.md).
STOP_GRACE_S = 0.03
#: GC pauses and event-loop heartbeats buffered between flushes (a flush every SPAN_FLUSH_S)
MAX_PAUSES_BUFFERED = 50000
#: a heartbeat is scheduled on each running event loop this often; its lateness is the lag
LOOP_HEARTBEAT_S = 0.1
#: how often the agent looks for running event loops (the frames of the threads: cheap)
LOOP_SCAN_S = 5.0
MAX_LOOPS = 16
#: call samples buffered between flushes, and the deepest stack taken (innermost kept)
MAX_CALL_SAMPLES_BUFFERED = 20000
MAX_SAMPLE_DEPTH = 256
#: a thread that ended an annotated span (infertop.stage) this recently is still sampled: the
#: agent knows an annotation only when it ends, so its calls are joined to samples afterwards
SPAN_THREAD_KEEP_S = 5.0
#: the agent's thread woke this much later than it asked to (its poll timed out): it waited
#: for the GIL (held by a C call that keeps it) or for a CPU; 2x the 5 ms switch interval.
#: Which of the two is told by the thread's own run-queue wait over the poll (schedstat), and
#: whether the target's threads waited too by their CPU clocks (callsamples.py, ``_note_wake``)
GIL_LATE_S = 0.010
#: how often the agent lists the target's Python threads that ran since the last look (their
#: CPU clocks): only those are read around each poll, at most MAX_GIL_THREADS of them
GIL_THREADS_SCAN_S = 1.0
MAX_GIL_THREADS = 16
#: the agent's run-queue delay is read after each late wake-up, and before a poll only when the
#: last reading is this old: a poll that ends late then counts as waiting for a CPU what the
#: on-time ones before it waited too (sub-millisecond on a host with CPUs to spare)
RUN_DELAY_READ_S = 0.1
