"""Defaults in one place, and loading of the user's TOML config.

A config file looks like::

    [collect]
    rate = 50           # py-spy samples per second (each one stops the target ~0.3 ms)
    window = 1.0        # seconds per py-spy window
    cpu_every = 2       # every 2nd window samples CPU (active threads), the rest wall time
    realtime = false    # true: py-spy real-time while its ticks come late (costs the target)
    retain = 300        # seconds of full detail a live session keeps (older: summed)

    [stages]            # extra stage rules, tried before the defaults
    preprocess = ["*server.py:encode_batch", "parse_request"]
    retrieval = ["*/faiss/*:*"]

    [tail]              # the slow calls of a stage (default: its p99), for the tail view
    slow = { preprocess = 40 }
    [flame]             # call plumbing merged into its caller in flames and top frames
    fold = ["*/mylib/decorators.py:wrapper"]    # folded as well as the defaults
    fold_defaults = true                        # false: only the patterns above
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from infertop.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: The stages every report lists, in pipeline order. Users may add their own names.
STAGES: tuple[str, ...] = (
    "preprocess",
    "ipc",
    "queue",
    "forward",
    "prefill",
    "decode",
    "sync",
    "postprocess",
    "serialize",
    "other",
    "idle",
)

#: A generation call's two parts, from Hugging Face ``generate`` (transformers 5.x and 4.4x):
#: ``prefill`` (the prompt's forward, ``_prefill``, and ``generate``'s own set-up before the
#: loop) and ``decode`` (the token-by-token loop of ``_sample``, beam search or assisted
#: decoding). They claim every frame under them, the model's forward and the logits
#: processing included, as a user's rule does: ahead of waits and of the default rules.
GENERATION_RULES: tuple[tuple[str, str], ...] = (
    ("prefill", "*/transformers/generation/utils.py:_prefill"),
    ("decode", "*/transformers/generation/utils.py:_sample"),
    ("decode", "*/transformers/generation/utils.py:_beam_search"),
    ("decode", "*/transformers/generation/utils.py:_assisted_decoding"),
    # transformers 4.4x's other loops (it has no ``_prefill``: the prompt's forward is in the
    # loop's first step, so its samples read as decode there)
    ("decode", "*/transformers/generation/utils.py:_greedy_search"),
    ("decode", "*/transformers/generation/utils.py:_contrastive_search"),
    ("decode", "*/transformers/generation/utils.py:_group_beam_search"),
    ("decode", "*/transformers/generation/utils.py:_constrained_beam_search"),
    ("decode", "*/transformers/generation/utils.py:_dola_decoding"),
    ("prefill", "*/transformers/generation/utils.py:generate"),
)

#: Default stage rules, ``(stage, pattern)``: pattern is ``FUNC_GLOB`` or ``FILE_GLOB:FUNC_GLOB``.
#: For each frame, innermost first, the first rule that matches decides. Order matters only
#: between rules that can match the same frame (decode before the tokenizer catch-all, say).
DEFAULT_STAGE_RULES: tuple[tuple[str, str], ...] = (
    # infertop's own agent thread inside the target: its cost, shown as what it is
    ("infertop", "<infertop-agent>:*"),
    # vLLM's v1 engine (docs/stages.md, "LLM engines"): the engine step in its engine core
    # (scheduling; the wait for the worker is in WAIT_STAGE_RULES) and in its model worker
    # (preparing the inputs, the forward, sampling); the hops between them are ipc
    ("ipc", "*/vllm/v1/serial_utils.py:*"),
    ("ipc", "*/vllm/distributed/device_communicators/shm_broadcast.py:MessageQueue.enqueue"),
    ("ipc", "*/vllm/distributed/device_communicators/shm_broadcast.py:MessageQueue.dequeue"),
    ("ipc", "*/vllm/v1/executor/multiproc_executor.py:WorkerProc.enqueue_output"),
    ("ipc", "*/vllm/v1/executor/multiproc_executor.py:*.collective_rpc"),
    ("postprocess", "*/vllm/v1/core/sched/*:*.update_from_output"),
    ("schedule", "*/vllm/v1/core/*:*"),
    ("forward", "*/vllm/v1/worker/*model_runner*.py:*._model_forward"),
    ("postprocess", "*/vllm/v1/sample/*:*"),
    ("postprocess", "*/vllm/v1/worker/*model_runner*.py:*.sample_tokens"),
    ("prepare", "*/vllm/v1/worker/*model_runner*.py:*"),
    ("prepare", "*/vllm/v1/worker/*input_batch*.py:*"),
    ("prepare", "*/vllm/v1/worker/block_table.py:*"),
    ("prepare", "*/vllm/v1/worker/*:*.execute_model"),
    ("forward", "*/vllm/model_executor/*:*"),
    ("forward", "*/vllm/compilation/*:*"),
    # SGLang (0.5, from its source; not run here: docs/stages.md): its scheduler process runs
    # the model; its step is choosing the batch, running it, processing the result
    ("ipc", "*/sglang/srt/managers/scheduler.py:Scheduler.ingest_requests"),
    ("schedule", "*/sglang/srt/managers/schedule_policy.py:*"),
    ("schedule", "*/sglang/srt/managers/scheduler.py:Scheduler.get_next_batch_to_run"),
    ("postprocess", "*/sglang/srt/managers/scheduler_components/batch_result_processor.py:*"),
    ("postprocess", "*/sglang/srt/layers/sampler.py:*"),
    ("prepare", "*/sglang/srt/model_executor/forward_batch_info.py:*"),
    ("forward", "*/sglang/srt/model_executor/*:*"),
    ("forward", "*/sglang/srt/models/*:*"),
    # the handler methods of serving frameworks (LitServe's LitAPI, Triton's Python backend; a
    # model's ``predict``, as scikit-learn's and most servers' APIs call it), before the
    # generic names below (``decode_request`` is no tokenizer decode)
    ("preprocess", "*.decode_request"),
    ("forward", "*.predict"),
    ("forward", "*TritonPythonModel.execute"),
    ("serialize", "*.encode_response"),
    # request parsing and tokenizers (decode side is postprocess)
    ("postprocess", "*detokeniz*"),
    ("postprocess", "*tokeniz*:*decode*"),
    ("postprocess", "*/tokenizers/*:*decode*"),
    ("preprocess", "*/tokenizers/*:*"),
    ("preprocess", "*/transformers/tokenization_*:*"),
    ("preprocess", "*/transformers/models/*/tokenization_*:*"),
    ("preprocess", "*/sentencepiece/*:*"),
    ("preprocess", "*/tiktoken/*:*"),
    ("preprocess", "*tokeniz*:*"),
    ("preprocess", "*/transformers/image_processing_*:*"),
    ("preprocess", "*/torchvision/transforms/*:*"),
    ("preprocess", "*/PIL/*:*"),
    ("preprocess", "*/json/decoder.py:*"),
    ("preprocess", "*/json/__init__.py:load*"),
    ("preprocess", "*tokenize*"),
    ("preprocess", "*preprocess*"),
    ("preprocess", "*parse_request*"),
    # the hop between processes: pickling for, and sending on, multiprocessing pipes and
    # queues (a queue's feeder thread included), shared-memory hand-offs, ZeroMQ sends. A
    # blocking receive is a wait (WAIT_FRAMES); unpickling runs in C under ``Connection.recv``,
    # which is one of them, so the receiving side is counted short, never long
    ("ipc", "*/multiprocessing/reduction.py:*"),
    ("ipc", "*/multiprocessing/connection.py:*._send*"),
    ("ipc", "*/multiprocessing/connection.py:*.send*"),
    ("ipc", "*/multiprocessing/queues.py:*._feed"),
    ("ipc", "*/multiprocessing/queues.py:*.put*"),
    ("ipc", "*/multiprocessing/shared_memory.py:*"),
    ("ipc", "*/multiprocessing/managers.py:BaseProxy._callmethod"),
    ("ipc", "*/zmq/sugar/socket.py:*.send*"),
    ("ipc", "*/zmq/utils/*:*"),
    # serialization of results
    ("serialize", "*/json/encoder.py:*"),
    ("serialize", "*/json/__init__.py:dump*"),
    ("serialize", "*/orjson/*:*"),
    ("serialize", "*/msgpack/*:*"),
    ("serialize", "*/pickle.py:*"),
    ("serialize", "*/copyreg.py:*"),
    ("serialize", "*/google/protobuf/*:*"),
    ("serialize", "*serializ*"),
    ("serialize", "*to_json*"),
    # host blocked on the device
    ("sync", "*/torch/cuda/*:*synchronize*"),
    ("sync", "*/torch/cuda/streams.py:*.synchronize"),
    ("sync", "*/torch/cuda/streams.py:*.wait*"),
    # logits processing, sampling, decoding
    ("postprocess", "*/transformers/generation/logits_process.py:*"),
    ("postprocess", "*/transformers/generation/stopping_criteria.py:*"),
    ("postprocess", "*postprocess*"),
    ("postprocess", "*logits*"),
    ("postprocess", "*sample_next*"),
    ("postprocess", "*sample_token*"),
    ("postprocess", "*decode*"),
    # the model
    ("forward", "*/torch/nn/modules/*:*"),
    ("forward", "*/torch/_dynamo/*:*"),
    ("forward", "*/torch/_inductor/*:*"),
    ("forward", "*/torch/fx/*:*"),
    ("forward", "*/torch/jit/*:*"),
    ("forward", "*/transformers/models/*:*"),
    ("forward", "*/transformers/generation/utils.py:*"),
    ("forward", "*forward"),
    ("forward", "*generate"),
    # waiting for work or for a batch to fill
    ("queue", "*/queue.py:*.get"),
    ("queue", "*/queue.py:*.put"),
    ("queue", "*/asyncio/queues.py:*"),
    ("queue", "*/selectors.py:*.select"),
    ("queue", "*/multiprocessing/queues.py:*.get"),
    ("queue", "*wait*batch*"),
    ("queue", "*batch*wait*"),
    ("queue", "*dequeue*"),
    ("queue", "*next_batch*"),
    ("queue", "*collect_batch*"),
)


#: Blocking waits. A sample whose innermost frame is one of these is a thread waiting, not
#: working: it is ``queue`` when a queue rule matches somewhere on its stack (a batcher in
#: ``Queue.get``), else ``idle`` (a request thread waiting for its reply). py-spy reports such
#: threads as active while they are runnable but waiting for a CPU or for the GIL.
WAIT_FRAMES: tuple[str, ...] = (
    "*/threading.py:Condition.wait*",
    "*/threading.py:Event.wait",
    "*/threading.py:Semaphore.acquire",
    "*/threading.py:Barrier.wait",
    "*/threading.py:Thread.join",
    "*/threading.py:Thread._wait_for_tstate_lock",
    "*/concurrent/futures/_base.py:*.result",
    "*/concurrent/futures/_base.py:wait",
    "*/selectors.py:*.select",
    "*/subprocess.py:Popen.wait",
    "*/subprocess.py:Popen._wait",
    "*/multiprocessing/connection.py:*.recv*",
    "*/multiprocessing/connection.py:*._recv*",  # a blocking read of the pipe
    "*/multiprocessing/connection.py:*._poll",
    "*/multiprocessing/connection.py:*Listener.accept",
    "*/socket.py:socket.accept",
    "*/zmq/sugar/socket.py:*.recv*",
    "*/zmq/sugar/poll.py:*.poll",
    "*/multiprocessing/connection.py:wait",
    "<infertop-agent>:_Agent._wait_for_io",  # the injected agent between its windows
    # vLLM's shared-memory queue between its engine core and its workers: a reader spins on it
    # (sched_yield), burning a CPU while it waits (WAIT_STAGE_RULES says for what)
    "*/vllm/distributed/utils.py:sched_yield",
    "*/vllm/distributed/device_communicators/shm_broadcast.py:SpinCondition.wait",
    "*/vllm/distributed/device_communicators/shm_broadcast.py:MessageQueue.acquire_read*",
    "*/vllm/distributed/device_communicators/shm_broadcast.py:memory_fence",
    "*/vllm/distributed/device_communicators/shm_broadcast.py:*ReadTimeoutWithWarnings.*",
)

#: What a thread caught in a blocking wait (WAIT_FRAMES) waits for, where the stack says it
#: better than the queue rules do: a frame anywhere on the stack, innermost first, decides
#: before them. vLLM's engine core spins on the worker's reply: the step's model execution
#: (``forward``, as a device sync is ``sync``), not a queue; its worker spinning for the next
#: step, and the engine core waiting for requests or outputs, have no work: ``idle``.
WAIT_STAGE_RULES: tuple[tuple[str, str], ...] = (
    ("forward", "*/vllm/v1/executor/multiproc_executor.py:*get_response"),
    ("idle", "*/vllm/v1/executor/multiproc_executor.py:WorkerProc.worker_busy_loop"),
    ("idle", "*/vllm/v1/engine/core.py:EngineCoreProc._process_input_queue"),
    ("idle", "*/vllm/v1/engine/core.py:EngineCoreProc.process_input_sockets"),
    ("idle", "*/vllm/v1/engine/core.py:EngineCoreProc.process_output_sockets"),
)


#: Call plumbing that adds no information, merged into its caller in every flame and in the top
#: frames (time kept, just not drawn as a level; key ``z`` in the UI shows it again). Patterns
#: are ``FILE_GLOB:FUNC_GLOB`` like stage rules; a dotted name also matches the bare name
#: Python < 3.11 reports (``Thread.run`` matches ``run`` in ``threading.py``).
DEFAULT_FOLD_FRAMES: tuple[str, ...] = (
    "*/torch/nn/modules/module.py:Module._wrapped_call_impl",
    "*/torch/nn/modules/module.py:Module._call_impl",
    "*/torch/utils/_contextlib.py:*decorate_context",  # @torch.no_grad(), @inference_mode()
    "*/contextlib.py:*.inner",  # ContextDecorator used as a decorator
    "*/functools.py:*wrapper",  # singledispatch
    "*/functools.py:*._method",  # singledispatchmethod
    "*/transformers/utils/deprecation.py:*wrapped_func",
    "*/transformers/utils/generic.py:*wrapper",  # can_return_tuple, check_model_inputs, ...
    "*/transformers/utils/output_capturing.py:*wrapper",
    "*/transformers/utils/import_utils.py:*wrapper",
    "*/transformers/modeling_layers.py:*forward_with_checkpointing",  # every decoder layer
    "*/threading.py:Thread._bootstrap",
    "*/threading.py:Thread._bootstrap_inner",
    "*/threading.py:Thread.run",
    "*/concurrent/futures/thread.py:_worker",
    "*/concurrent/futures/thread.py:_WorkItem.run",
    "*importlib._bootstrap*:_call_with_frames_removed",  # every import's trampoline
    # the agent's wrapper around each timed entry point on Python < 3.12 (payload/wrappers.py)
    "<infertop-agent>:*infertop_timed*",
)


@dataclass(frozen=True)
class CollectConfig:
    #: 50 Hz: every py-spy sample stops all the target's threads (~0.3 ms with 8 threads), so
    #: 100 Hz stops it ~3.5 % of the time, over the 3 % budget by itself (docs/performance.md)
    rate_hz: float = 50.0
    window_s: float = 1.0
    #: every ``cpu_every``-th py-spy window is a CPU window (active samples only), the others
    #: wall windows (``--idle``: every thread at every tick); 0: wall only, 1: CPU only
    cpu_every: int = 2
    #: py-spy at real-time priority while its ticks come late, where the kernel allows it: on
    #: a host whose cores are full its ticks come on time (the wall view's stages right to ~3
    #: points instead of ~5), at a cost to the target's critical path (collect/priority.py)
    realtime: bool = False
    history_windows: int = 120  # windows kept for the stage history sparkline
    #: seconds of full detail a live session keeps; older windows, spans and op windows are
    #: folded into whole-session summaries (docs/performance.md, "infertop's own memory")
    retain_s: float = 300.0


@dataclass(frozen=True)
class FindingThresholds:
    """When each bottleneck rule fires (docs/findings.md). Override in a config's [findings]."""

    memcpy_pageable_min_bytes: int = 1  # any pageable copy is worth pinning
    memcpy_sync_blocked_share: float = 0.05  # host blocked on the device ≥ 5 % of wall time
    memcpy_small_bytes: int = 64 * 1024
    memcpy_small_share: float = 0.5  # ≥ half of all transfers are small ...
    memcpy_small_min_per_s: float = 100.0  # ... and there are ≥ 100 per second
    copy_heavy_share: float = 0.10  # copies ≥ 10 % of forward / GPU time
    python_overhead_share: float = 0.30  # ≥ 30 % of forward wall outside torch ops
    python_overhead_min_ops: int = 100  # ... judged only with enough ops to judge by
    #: copy-heavy, python-overhead and tiny-ops (CPU) read op timings; where the op thread waited this share of
    #: its runnable time for a CPU in the windows, its stops are in them: the finding says so
    #: and is low at most
    starved_share: float = 0.25
    tiny_ops_us: float = 10.0  # ops/kernels shorter than this are "tiny"
    tiny_ops_share: float = 0.5  # most of them
    tiny_ops_gpu_busy: float = 0.5  # ... while the GPU is busy less than half the time
    gpu_idle_busy: float = 0.5  # GPU busy < 50 % of the time
    gpu_idle_gap_ms: float = 100.0  # or idle gaps longer than this
    preprocess_hot_share: float = 0.25
    serialize_hot_share: float = 0.15
    ipc_heavy_share: float = 0.15  # the hop between processes ≥ 15 % of request latency (else of active time)
    stage_min_samples: int = 20  # a stage-share rule needs this many samples of the stage
    queue_wait_share: float = 0.30
    #: an LLM engine's model worker busy outside the model's forward (inputs, sampling, hops)
    engine_step_overhead_share: float = 0.30
    gil_contention_share: float = 0.20
    gc_pause_share: float = 0.05  # collections take ≥ 5 % of wall time ...
    gc_long_pause_ms: float = 100.0  # ... or a pause this long ...
    gc_long_pause_calls: float = 0.01  # ... lands in ≥ 1 % of stage calls
    event_loop_lag_p99_ms: float = 50.0
    memory_pressure_reserved: float = 0.90
    #: kv-cache-headroom fires when the largest batch at the longest sequence would need more
    #: than this share of the device memory left, beyond the largest cache already held
    kv_headroom_share: float = 0.8
    #: ... and, for an LLM engine whose scheduler the agent read (vLLM), when its KV cache's
    #: usage reached this share of its blocks, or the engine preempted a request
    kv_usage_share: float = 0.90
    fragmentation_share: float = 0.30
    fragmentation_min_bytes: int = 1 << 30
    #: memory-growth: a process's RSS past warm-up rises along a line (R² ≥ this) ...
    memory_growth_r2: float = 0.8
    memory_growth_min_s: float = 20.0  # ... over this many seconds of readings or more ...
    memory_growth_min_bytes: int = 8 << 20  # ... by this much or more ...
    #: ... and its last third still rises at this share of the whole rate (else it flattens:
    #: a cache that filled)
    memory_growth_recent_share: float = 0.5
    #: memory-pressure: a process's memory cgroup uses this share of its limit or more ...
    memory_pressure_limit_share: float = 0.90
    #: ... or a stage's slow calls spent this share of their time or more while the process
    #: took major faults (or its cgroup stalled on memory), twice the typical calls' share
    memory_pressure_slow_share: float = 0.5
    straggler_slower: float = 0.10  # a process's step work ≥ 10 % above the others' median ...
    straggler_steps_share: float = 0.5  # ... in more than half of the steps compared
    straggler_min_steps: int = 2  # steps every process has, to compare at all
    #: the target's threads waited for a CPU this share of their runnable time or more
    #: (medium from 0.35, high from 0.5) over at least this many runnable seconds
    cpu_starved_share: float = 0.20
    cpu_starved_min_runnable_s: float = 2.0
    #: a straggler whose process waited for a CPU this much more of its runnable time than its
    #: peers' median: the host's doing, which cpu-starved says instead
    straggler_cpu_wait_margin: float = 0.05


@dataclass(frozen=True)
class SeverityBands:
    """How severe a rule's finding is, from the number it is judged by (``measure``): high from
    ``high`` on, medium from ``medium`` on (None: no medium band), else ``floor`` (``medium``
    for a rule that fires only where it matters that much). ``of``: the bands are multiples of
    that ``FindingThresholds`` field, so they move with it when a config overrides it;
    ``falling``: a smaller number is worse (high at ``high`` or below)."""

    measure: str
    medium: float | None
    high: float
    of: str | None = None
    floor: str = "low"
    falling: bool = False

    def severity(self, x: float, th: FindingThresholds, at_least: str = "low") -> str:
        """``x``'s band; ``at_least``: what the rule's other evidence makes it already (an OOM
        is high whatever the share)."""
        k = float(getattr(th, self.of)) if self.of else 1.0

        def reached(band: float) -> bool:
            return x <= band * k if self.falling else x >= band * k

        if at_least == "high" or reached(self.high):
            return "high"
        if at_least == "medium" or (self.medium is not None and reached(self.medium)):
            return "medium"
        return self.floor


#: every rule's severity bands, by rule id (a rule judged by two numbers: ``RULE:WHAT`` too):
#: the one place they are set (docs/findings.md); not overridable, unlike the thresholds
SEVERITY_BANDS: dict[str, SeverityBands] = {
    "memcpy-pageable": SeverityBands("the copies' share of GPU busy time", 0.02, 0.10),
    "memcpy-sync": SeverityBands("the host's share of wall time blocked on the device", 0.10, 0.25),
    "memcpy-small": SeverityBands("transfers per second", 1000, 10000),
    "copy-heavy": SeverityBands("copies' share of forward (or GPU busy) time", 0.20, 0.35),
    "python-overhead": SeverityBands("the forward's share outside torch ops", 0.45, 0.60),
    "tiny-ops": SeverityBands("the tiny kernels' share", 0.70, 0.90),
    "tiny-ops:cpu": SeverityBands("the op timeline's idle share (CPU-only)", 0.45, 0.60),
    "gpu-idle": SeverityBands("the GPU's idle share", 0.60, 0.80),
    "preprocess-hot": SeverityBands("share", 1.5, 2.0, of="preprocess_hot_share"),
    "serialize-hot": SeverityBands("share", 1.5, 2.0, of="serialize_hot_share"),
    "ipc-heavy": SeverityBands("share of latency (else of samples)", 1.5, 2.0, of="ipc_heavy_share"),
    "queue-wait": SeverityBands("queue share of latency", 0.45, 0.60),
    "engine-step-overhead": SeverityBands("the worker's share outside the forward", 0.45, 0.60),
    "gil-contention": SeverityBands("share of time waiting for the GIL", 0.35, 0.50),
    # high too where pauses of gc_long_pause_ms land in gc_long_pause_calls of the calls
    "gc-pauses": SeverityBands("collections' share of wall time", None, 0.15, floor="medium"),
    "event-loop-lag": SeverityBands("p99 lag", None, 4.0, of="event_loop_lag_p99_ms", floor="medium"),
    # high too with OOMs, medium with allocator retries
    "gpu-memory-pressure": SeverityBands("reserved share of the device's memory", 0.93, 0.97),
    # high too with OOMs
    "kv-cache-headroom": SeverityBands(
        "bytes the worst case needs beyond the memory left", None, 1, floor="medium"
    ),
    # an engine's cache (vLLM): high too with preemptions
    "kv-cache-headroom:usage": SeverityBands("the engine's KV-cache usage, max", None, 0.99, floor="medium"),
    "allocator-fragmentation": SeverityBands("slack share of reserved", 0.45, 0.60),
    # high too where the cgroup's OOM killer struck
    "memory-growth": SeverityBands("growth, bytes per hour", 1 << 30, 8 << 30),
    "memory-growth:limit": SeverityBands(
        "seconds until the memory cgroup's limit at that rate", None, 3600.0, falling=True
    ),
    # high too with the cgroup's OOM kills, medium at least with slow calls under pressure
    "memory-pressure": SeverityBands("the memory cgroup's usage share of its limit", 0.93, 0.97),
    "straggler": SeverityBands("median excess over the others", 0.15, 0.25),
    "cpu-starved": SeverityBands("the threads' share of runnable time waiting for a CPU", 0.35, 0.50),
}  # fmt: skip


@dataclass(frozen=True)
class Config:
    collect: CollectConfig = field(default_factory=CollectConfig)
    findings: FindingThresholds = field(default_factory=FindingThresholds)
    #: user rules, tried before the defaults: ``(stage, pattern)``
    stage_rules: tuple[tuple[str, str], ...] = ()
    #: frames folded into their callers (``[flame] fold``, after the defaults)
    fold_frames: tuple[str, ...] = DEFAULT_FOLD_FRAMES
    #: a stage's calls at least this slow (ms) are its slow calls in the tail view (``[tail]
    #: slow``, ``--slow STAGE=MS``); a stage not named: its p99
    slow_ms: tuple[tuple[str, float], ...] = ()
    #: functions that are generation calls (a hand-written decode loop: ``--generate``,
    #: ``[generate] functions``), as FILE_GLOB:FUNC_GLOB; their samples are ``decode``
    generate_functions: tuple[str, ...] = ()

    def with_stage_args(self, args: list[str]) -> Config:
        """Add ``--stage NAME=PATTERN`` arguments (they go before the file's rules)."""
        return replace(self, stage_rules=tuple(parse_stage_arg(a) for a in args) + self.stage_rules)

    def with_generate_args(self, args: list[str]) -> Config:
        """Add ``--generate FILE_GLOB:FUNC_GLOB`` arguments: the agent follows each call as a
        generation, and the call's samples are ``decode`` (a rule before the defaults)."""
        patterns = tuple(parse_generate_arg(a) for a in args)
        rules = tuple(("decode", p) for p in patterns)
        return replace(
            self, generate_functions=self.generate_functions + patterns, stage_rules=rules + self.stage_rules
        )

    def with_slow_args(self, args: list[str]) -> Config:
        """Add ``--slow STAGE=MS`` arguments (they replace the file's for the same stage)."""
        given = dict(self.slow_ms)
        given.update(parse_slow_arg(a) for a in args)
        return replace(self, slow_ms=tuple(given.items()))


def parse_slow_arg(arg: str) -> tuple[str, float]:
    name, sep, value = arg.partition("=")
    name, value = name.strip(), value.strip().removesuffix("ms").strip()
    try:
        ms = float(value)
    except ValueError:
        ms = -1.0
    if not sep or not name or not 0 < ms < math.inf:
        raise UsageError(
            f"bad --slow {arg!r}",
            "write STAGE=MS, e.g. --slow preprocess=40: its calls of 40 ms or more are the slow ones",
        )
    return name, ms


def parse_generate_arg(arg: str) -> str:
    pattern = arg.strip()
    func = pattern.rsplit(":", 1)[-1]
    if not pattern or not func or "=" in pattern:
        raise UsageError(
            f"bad --generate {arg!r}",
            "write FUNC_GLOB or FILE_GLOB:FUNC_GLOB of your generation loop, e.g. "
            "--generate '*server.py:generate_tokens' (Hugging Face generate needs none)",
        )
    return pattern


def parse_stage_arg(arg: str) -> tuple[str, str]:
    name, sep, pattern = arg.partition("=")
    name, pattern = name.strip(), pattern.strip()
    if not sep or not name or not pattern:
        raise UsageError(
            f"bad --stage {arg!r}",
            "write NAME=PATTERN, e.g. --stage preprocess='*server.py:encode_batch'",
        )
    if not name.replace("_", "").replace("-", "").isalnum() or name == "idle":
        raise UsageError(f"bad stage name {name!r} in --stage", "use letters, digits, '_', '-'")
    return name, pattern


def load_config(path: str | None) -> Config:
    """Read a TOML config; no path means the defaults."""
    if path is None:
        return Config()
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read config file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from None
    collect = CollectConfig()
    raw_collect = data.get("collect", {})
    if not isinstance(raw_collect, dict):
        raise UsageError(f"{path}: [collect] must be a table")
    try:
        if "rate" in raw_collect:
            collect = replace(collect, rate_hz=_positive(raw_collect["rate"], "collect.rate", path))
        if "window" in raw_collect:
            collect = replace(collect, window_s=_positive(raw_collect["window"], "collect.window", path))
        if "cpu_every" in raw_collect:
            every = raw_collect["cpu_every"]
            if not isinstance(every, int) or isinstance(every, bool) or not 0 <= every <= 100:
                raise UsageError(f"{path}: collect.cpu_every must be a whole number 0..100",
                                 "0: wall windows only, 1: CPU windows only, N: every Nth is CPU")  # fmt: skip
            collect = replace(collect, cpu_every=every)
        if "realtime" in raw_collect:
            if not isinstance(raw_collect["realtime"], bool):
                raise UsageError(f"{path}: collect.realtime must be true or false")
            collect = replace(collect, realtime=raw_collect["realtime"])
        if "retain" in raw_collect:
            collect = replace(collect, retain_s=_positive(raw_collect["retain"], "collect.retain", path))
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    rules: list[tuple[str, str]] = []
    raw_stages = data.get("stages", {})
    if not isinstance(raw_stages, dict):
        raise UsageError(f"{path}: [stages] must be a table of NAME = [PATTERN, ...]")
    for name, patterns in raw_stages.items():
        if isinstance(patterns, str):
            patterns = [patterns]
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise UsageError(f"{path}: stages.{name} must be a pattern or a list of patterns")
        if "=" in name:  # NAME=PATTERN would split at it: another stage, silently
            raise UsageError(f"{path}: bad stage name {name!r}", "use letters, digits, '_', '-'")
        rules.extend(parse_stage_arg(f"{name}={p}") for p in patterns)
    findings = FindingThresholds()
    raw_findings = data.get("findings", {})
    if not isinstance(raw_findings, dict):
        raise UsageError(f"{path}: [findings] must be a table of THRESHOLD = NUMBER")
    for key, value in raw_findings.items():
        if key not in FindingThresholds.__dataclass_fields__:
            known = ", ".join(FindingThresholds.__dataclass_fields__)
            raise UsageError(f"{path}: unknown finding threshold {key!r}", f"known: {known}")
        try:
            number = type(getattr(findings, key))(_positive(value, f"findings.{key}", path))
            findings = replace(findings, **{key: number})
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    cfg = Config(collect=collect, stage_rules=tuple(rules), findings=findings,
                 fold_frames=_fold_frames(data.get("flame", {}), path),
                 slow_ms=_slow(data.get("tail", {}), path))  # fmt: skip
    return cfg.with_generate_args(_generate(data.get("generate", {}), path))


def _generate(raw: object, path: str) -> list[str]:
    if not isinstance(raw, dict) or set(raw) - {"functions"}:
        raise UsageError(f"{path}: [generate] must be a table with functions = [PATTERN, ...]")
    patterns = raw.get("functions", [])
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise UsageError(f"{path}: generate.functions must be a list of FILE_GLOB:FUNC_GLOB patterns")
    return patterns


def _slow(raw: object, path: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(raw, dict) or set(raw) - {"slow"} or not isinstance(raw.get("slow", {}), dict):
        raise UsageError(f"{path}: [tail] must be a table with slow = {{STAGE = MS, ...}}")
    try:
        return tuple((str(k), _positive(v, f"tail.slow.{k}", path)) for k, v in raw.get("slow", {}).items())
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _fold_frames(raw: object, path: str) -> tuple[str, ...]:
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: [flame] must be a table (fold = [PATTERN, ...])")
    unknown = set(raw) - {"fold", "fold_defaults"}
    if unknown:
        raise UsageError(f"{path}: unknown [flame] key {sorted(unknown)[0]!r}",
                         "known: fold, fold_defaults")  # fmt: skip
    patterns = raw.get("fold", [])
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise UsageError(f"{path}: flame.fold must be a list of FILE_GLOB:FUNC_GLOB patterns")
    defaults = raw.get("fold_defaults", True)
    if not isinstance(defaults, bool):
        raise UsageError(f"{path}: flame.fold_defaults must be true or false")
    return (DEFAULT_FOLD_FRAMES if defaults else ()) + tuple(patterns)


def _positive(value: object, key: str, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{path}: {key} must be a positive number, not {value!r}")
    return float(value)
