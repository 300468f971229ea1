"""Reading a window's ``_KinetoEvent`` objects into event tuples, and keeping the target's stderr
clean of libkineto's lines."""

from __future__ import annotations

import os
import re
import sys
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.constants import C10_QUIET_LEVEL, KINETO_QUIET_LEVEL
from infertop.agent.payload.events import CPU_KINDS, GPU_KINDS, MEMORY_KIND, RUNTIME_KINDS

# -- end --


_BYTES_RE = re.compile(r'"bytes"\s*:\s*(\d+)')


def format_shapes(shapes, dtypes):
    """``float[8, 64], long[8]``: the tensor inputs of an op, at most ~96 characters."""
    parts = []
    try:
        for i, shape in enumerate(shapes):
            if not shape:
                continue
            dtype = dtypes[i] if i < len(dtypes) else ""
            parts.append("%s%s" % (dtype, list(shape)))
    except Exception:
        return None
    if not parts:
        return None
    text = ", ".join(parts)
    return text if len(text) <= 96 else text[:93] + "..."


def kineto_events(results_events, limit, record_shapes, end_ns=None):
    """Event tuples from ``prof.kineto_results.events()`` (``_KinetoEvent`` objects).

    Only the first ``limit`` events are read. Uses ``activity_type()`` where this torch has it,
    else infers the kind from the device type and the name. ``end_ns``: when the profiler
    stopped; an op still running then has no real end (torch reports a wrapped-around
    duration), so durations are clamped to it.
    """
    out = []
    append = out.append
    evs = results_events[:limit] if len(results_events) > limit else results_events
    if not len(evs):
        return out
    cls = type(evs[0])
    has_activity = hasattr(cls, "activity_type")
    has_resource = hasattr(cls, "device_resource_id")
    ns = hasattr(cls, "start_ns")
    for e in evs:
        kind = e.activity_type() if has_activity else _guess_kind(e)
        if kind == "cpu_instant_event" or kind == MEMORY_KIND:
            if e.name() == "[memory]":  # profile_memory's allocations and frees
                append(_memory_event(e, has_resource, ns))
            continue
        cpu = kind in CPU_KINDS
        if not cpu and kind not in GPU_KINDS and kind not in RUNTIME_KINDS and kind != "cuda_sync":
            continue
        if ns:
            start = e.start_ns()
            dur = e.duration_ns()
        else:
            start = e.start_us() * 1000
            dur = e.duration_us() * 1000
        if end_ns is not None and (dur < 0 or start + dur > end_ns):
            dur = end_ns - start if end_ns > start else 0
        if cpu:
            shapes = None
            if record_shapes and kind == "cpu_op":
                shapes = format_shapes(e.shapes(), e.dtypes())
            tid = e.device_resource_id() if has_resource else e.start_thread_id()
            append((kind, e.name(), tid, start, dur, e.correlation_id(), 0, 0, shapes))
        else:
            nbytes = 0
            if kind == "gpu_memcpy" or kind == "gpu_memset":
                try:
                    m = _BYTES_RE.search(e.metadata_json() or "")
                    nbytes = int(m.group(1)) if m else 0
                except Exception:
                    nbytes = 0
            stream = e.device_resource_id() if has_resource else 0
            append((kind, e.name(), stream, start, dur, e.correlation_id(), e.linked_correlation_id(), nbytes, None))
    return out


def _memory_event(e, has_resource, ns):
    """A ``[memory]`` instant event as a ``memory`` event tuple: its thread, time, signed bytes
    and device (``cpu`` or ``cuda``; other devices' count as ``cpu``)."""
    start = e.start_ns() if ns else e.start_us() * 1000
    tid = e.device_resource_id() if has_resource else e.start_thread_id()
    try:
        device = "cuda" if str(e.device_type()).endswith("CUDA") else "cpu"
    except Exception:
        device = "cpu"
    return (MEMORY_KIND, "[memory]", tid, start, 0, 0, 0, int(e.nbytes()), device)


def _guess_kind(e):
    try:
        device = str(e.device_type())
    except Exception:
        device = "CPU"
    name = e.name()
    if name == "[memory]":
        return MEMORY_KIND
    if device.endswith("CPU"):
        try:
            if e.is_user_annotation():
                return "user_annotation"
        except Exception:
            pass
        try:
            if e.linked_correlation_id() > 0:
                return "cuda_runtime"
        except Exception:
            pass
        return "cpu_op"
    if name.startswith("Memcpy"):
        return "gpu_memcpy"
    if name.startswith("Memset"):
        return "gpu_memset"
    return "kernel"


# ---------------------------------------------------------------------------------------------
# Keeping the target's stderr clean


class _KinetoLog:
    """libkineto's log threshold (``libkineto::Logger::severityLevel_``) via ctypes.

    libkineto prints ``USDT: ... profiler_start/stop`` (and, before its first use, may print
    ``STAGE``/``INFO`` lines) to stderr whatever torch's logging settings say; the threshold is
    read at every log call, so raising it around our windows silences exactly our lines.
    """

    SYMBOL = "_ZN9libkineto6Logger14severityLevel_E"

    def __init__(self):
        self.level = None  # a ctypes.c_int in libtorch, or None
        try:
            import ctypes

            paths = []
            with open("/proc/self/maps") as fh:
                for line in fh:
                    parts = line.split(None, 5)
                    if len(parts) == 6:
                        path = parts[5].strip()
                        if "torch" in path and ".so" in path and path not in paths:
                            paths.append(path)
            paths.sort(key=lambda p: "torch_cpu" not in p)
            mode = getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1)
            for path in paths:
                try:
                    lib = ctypes.CDLL(path, mode=mode)
                    self.level = ctypes.c_int.in_dll(lib, self.SYMBOL)
                    break
                except (OSError, ValueError):
                    continue
        except Exception:
            self.level = None

        self.c10 = None  # c10's LOG threshold (FLAGS_caffe2_log_level in libc10), or None
        try:
            import ctypes

            lib = ctypes.CDLL(
                "libc10.so", mode=getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1)
            )
            self.c10 = ctypes.c_int.in_dll(lib, "FLAGS_caffe2_log_level")
        except Exception:
            self.c10 = None

    def quiet_c10(self):
        """Raise c10's LOG threshold to errors (torch warns on stderr when collection is toggled
        and when an op outlives a stopped profiler); returns the value for ``restore_c10``."""
        if self.c10 is not None and self.c10.value >= C10_QUIET_LEVEL:
            return None  # already at least that quiet: leave it
        return _raise_threshold(self.c10, C10_QUIET_LEVEL)

    def restore_c10(self, old):
        _restore_threshold(self.c10, C10_QUIET_LEVEL, old)

    def initialised(self):
        """False while libkineto has never been initialised (threshold still 0/VERBOSE)."""
        return self.level is not None and self.level.value != 0

    def quiet(self):
        """Raise the threshold; returns the value to hand back to ``restore``."""
        return _raise_threshold(self.level, KINETO_QUIET_LEVEL)

    def restore(self, old):
        _restore_threshold(self.level, KINETO_QUIET_LEVEL, old)


def _raise_threshold(cint, level):
    """Set a C log threshold (a ctypes int, or None when not found); returns the old value."""
    if cint is None:
        return None
    old = cint.value
    cint.value = level
    return old


def _restore_threshold(cint, level, old):
    """Put back ``old`` unless someone else changed the threshold meanwhile."""
    if cint is not None and old is not None and cint.value == level:
        cint.value = old


_KINETO_LINE = re.compile(
    rb"^(?:(?:ERROR|WARNING|INFO|STAGE|USDT|VERBOSE):\d{4}-\d\d-\d\d |"
    rb"ERROR: External init callback|  (?:Log file|Trace start time|Trace duration|Warmup "
    rb"duration|Max GPU buffer size|Enabled activities):)"
)


def _run_capturing_stderr(fn):
    """Run ``fn`` with fd 2 sent to a pipe; forward every captured line that is not libkineto's.

    Used only around the first initialisation of libkineto (which may print a line with a raw
    fprintf that no log level controls). Lines of the target written meanwhile are delayed by
    the few milliseconds this takes, not lost.
    """
    try:
        r, w = os.pipe()
    except OSError:
        return fn()
    if r <= 2 or w <= 2:  # the target runs with std fds closed: nothing to protect
        os.close(r)
        os.close(w)
        return fn()
    saved = -1
    try:
        saved = os.dup(2)
        os.dup2(w, 2)
    except OSError:
        os.close(r)
        os.close(w)
        if saved >= 0:
            os.close(saved)
        return fn()
    os.close(w)
    try:
        return fn()
    finally:
        try:
            sys.stderr.flush()
        except Exception:
            pass
        os.dup2(saved, 2)
        os.close(saved)
        data = b""
        try:
            os.set_blocking(r, False)
            idle = 0
            while idle < 2:
                try:
                    chunk = os.read(r, 65536)
                except BlockingIOError:
                    idle += 1
                    time.sleep(0.01)
                    continue
                if not chunk:
                    break
                data += chunk
                idle = 0
        finally:
            os.close(r)
        if data:
            keep = [line for line in data.splitlines(True) if not _KINETO_LINE.match(line)]
            if keep:
                try:
                    os.write(2, b"".join(keep))
                except OSError:
                    pass
