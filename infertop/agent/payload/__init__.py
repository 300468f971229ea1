"""The in-process agent: runs inside the target and serves ``docs/agent-protocol.md``.

The modules of this package (``PARTS``) are sent into target processes as one source text
(``payload_source()``): the source of ``protocol.py``, then each part in the order of ``PARTS``,
then a call that starts the agent, all executed there in one fresh namespace. So every part must
stay self-contained: the stdlib and the target's own ``torch`` only (imported from
``sys.modules``, never imported by us), no numpy, nothing from ``infertop``, and Python 3.8+
syntax. A part may use the names the parts before it define (they share the namespace once
joined), so module-level names must not clash across parts.

Imported as normal modules (the tests, ``infertop.record.import_kineto``), the parts get those
names from each other instead: each one imports them in a block between the lines
``# -- imported as a module (payload_source leaves these lines out) --`` and ``# -- end --``,
which ``payload_source`` cuts out. This package itself is not part of the payload.

The parts, in order:

- ``constants``: names, defaults and measured limits;
- ``patterns``: the stage-pattern language (``FILE_GLOB:FUNC_GLOB``), which infertop's own
  stage rules use too;
- ``events``: the event tuple and how event names are classified;
- ``safe_reads``: other threads' stacks and the collector's objects, read so that the
  reading cannot break the threads that own them;
- ``reduce_memory``: the allocator's reports in a window by stage and op, each stage's peak per
  call, and an op's stage (shared with the op tables);
- ``reduce``: one window's events reduced to op paths / kernels / copies / syncs / annotations,
  op time and device busy time (``reduce_events``, pure functions);
- ``kineto``: ``_KinetoEvent`` objects to event tuples; keeping libkineto's lines off stderr;
- ``window``: the target's torch and one all-threads profiler window;
- ``engine_stats``: an LLM engine's scheduler read where its metrics are recorded (vLLM's
  ``StatLoggerManager.record``), summed per engine;
- ``stages``: ``stage_functions`` patterns, the entry points and models timed by default;
- ``monitor``: the ``sys.monitoring`` timer of those (Python >= 3.12);
- ``generation``: generation calls followed through that timer (prefill, decode, tokens,
  batch size, KV-cache bytes);
- ``wrap_slots``: where that timer's wrappers go (dictionary slots and hooked model
  instances), found by reading dictionaries only;
- ``wrappers``: the timer of Python < 3.12: the same functions wrapped in place (their class's
  or module's dictionary entries), restored on detach;
- ``memory``, ``spans``, ``pauses``, ``callsamples``, ``profiling``, ``serve``: the agent's
  mixins, one concern each (CUDA allocator statistics and the object census; stage spans; GC
  pauses and event-loop lag; stacks of the threads inside stage calls; duty-cycled profiler
  windows; the socket and commands); ``snapshot``: CUDA memory snapshots on request and on
  an out-of-memory error, written to files of the socket folder;
- ``agent``: ``_Agent`` itself (its thread, life cycle, sessions);
- ``start``: ``_infertop_agent_start``, what the joined text calls.

What the agent does, on one daemon thread named ``infertop-agent``:

- listens on ``/tmp/infertop-<uid>/agent-<pid>.sock`` (dir 0700, socket 0600), one client at a
  time, peer uid checked with ``SO_PEERCRED``;
- while started: duty-cycled ``torch.profiler`` windows over all threads, reduced in place to
  op paths / kernels / copies / syncs / annotations (``reduce_events``, a pure function);
  ``infertop.stage`` spans and, on Python >= 3.12, ``sys.monitoring`` timings of functions named
  by ``stage_functions``; CUDA caching-allocator statistics each second; every garbage
  collection's pause and each running asyncio loop's lag; the stacks of threads inside stage
  calls, ``call_sample_hz`` times a second;
- on ``detach`` or disconnect: stops everything within a second; an injected agent then removes
  its socket, its registry entry and its thread, an armed one waits for the next client.
"""

from __future__ import annotations

import importlib
import os

#: the names tests and infertop import from here, and the part each lives in: loaded when first
#: asked for, so that taking one (the trace report's ``memcpy_kind``) does not load every part
_EXPORTS = {
    "DEFAULT_CONFIG": "constants",
    "OP_GAP_NS": "constants",
    "REGISTRY_KEY": "constants",
    "CPU_KINDS": "events",
    "GPU_KINDS": "events",
    "RUNTIME_KINDS": "events",
    "is_blocking_call": "events",
    "kernel_kind": "events",
    "memcpy_kind": "events",
    "format_shapes": "kineto",
    "kineto_events": "kineto",
    "gpu_busy": "reduce",
    "op_time": "reduce",
    "op_thread_cpu": "reduce",
    "reduce_events": "reduce",
    "find_stage_codes": "stages",
    "match_stage": "stages",
    "parse_stage_patterns": "stages",
    "StagePattern": "patterns",
}


def __getattr__(name):
    part = _EXPORTS.get(name)
    if part is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{part}"), name)


__all__ = [
    "CPU_KINDS",
    "DEFAULT_CONFIG",
    "GPU_KINDS",
    "OP_GAP_NS",
    "PARTS",
    "REGISTRY_KEY",
    "RUNTIME_KINDS",
    "StagePattern",
    "find_stage_codes",
    "format_shapes",
    "gpu_busy",
    "is_blocking_call",
    "kernel_kind",
    "kineto_events",
    "match_stage",
    "memcpy_kind",
    "op_thread_cpu",
    "op_time",
    "parse_stage_patterns",
    "payload_source",
    "reduce_events",
]

#: The payload's modules, in the order they are joined (each uses only names defined before it).
PARTS = (
    "constants",
    "patterns",
    "events",
    "safe_reads",
    "reduce_memory",
    "reduce",
    "kineto",
    "window",
    "engine_stats",
    "stages",
    "monitor",
    "generation",
    "wrap_slots",
    "wrappers",
    "memory",
    "snapshot",
    "spans",
    "pauses",
    "callsamples",
    "profiling",
    "serve",
    "agent",
    "start",
)
_FUTURE = "from __future__ import annotations\n"
_IMPORTED = "# -- imported as a module (payload_source leaves these lines out) --\n"
_IMPORTED_END = "# -- end --\n"
_START_CALL = (
    "_infertop_agent_start(mode=%r, deadline=%r, boot_file=%r, free_region=%s, idle_exit_s=%r)\n"
)


def _part_source(path):
    """One module's source as it goes into the joined text: no ``__future__`` import (the text
    has one at its top) and no block of imports for use as a module."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    text = text.replace(_FUTURE, "", 1)
    start = text.find(_IMPORTED)
    if start >= 0:
        end = text.index(_IMPORTED_END, start) + len(_IMPORTED_END)
        text = text[:start] + text[end:]
    return text


def payload_source(
    mode="injected",
    deadline=None,
    boot_file=None,
    free_region=None,
    idle_exit_s=20.0,
    free_region_from_bootstrap=False,
):
    """The source to run in a target: protocol.py + the ``PARTS`` + a call that starts the agent.

    ``free_region_from_bootstrap``: take the region to free from the ``_infertop_free`` global
    the injector's bootstrap passes in (its address is known only inside the target).
    """
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(os.path.dirname(here), "protocol.py")]
    paths += [os.path.join(here, name + ".py") for name in PARTS]
    parts = [_part_source(path) for path in paths]
    if free_region_from_bootstrap:
        region = 'globals().get("_infertop_free")'
    else:
        region = repr(tuple(free_region) if free_region else None)
    call = _START_CALL % (mode, deadline, boot_file, region, float(idle_exit_s))
    return _FUTURE + "\n".join(parts) + "\n" + call
