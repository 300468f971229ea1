"""The ``sys.monitoring`` timer (Python >= 3.12) of the code objects ``stages.py`` finds: stage
calls, each known by its frame, with a forward call's batch size; the generation tracker
(``generation.py``) rides on its events."""

from __future__ import annotations

import sys
import threading
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.stages import _CO_ASYNC_GENERATOR, _CO_COROUTINE

# -- end --


def frame_of(code):
    """The running frame of ``code``: the callback's caller (a few frames up: the callback, and
    any wrapper around it, are above it). A frame object is made only when asked for: on a
    call's first and last event, not on those nested in it."""
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None or frame.f_code is code:
            break
        frame = frame.f_back
    return frame


def batch_of(frame, code):
    """A forward call's batch size: the leading dimension of its ``input_ids`` (an argument or
    in its ``**kwargs``) or of its first tensor argument, or the length of a list of requests
    (LitServe's ``predict(batch)``); None when it has none."""
    try:
        return _batch_of(frame.f_locals, code)
    except Exception:  # an odd argument: the call is still timed, without its batch
        return None


def _batch_of(local, code):
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    kwargs = local.get("kwargs")
    values = [local.get("input_ids")]
    if isinstance(kwargs, dict):
        values.append(kwargs.get("input_ids"))
    values += [local.get(n) for n in code.co_varnames[: min(code.co_argcount, 8)] if n != "self"]
    for v in values:
        if tensor is not None and isinstance(v, tensor):
            return int(v.shape[0]) if v.dim() > 0 else None
        if type(v) in (list, tuple) and v:
            return len(v)
        if isinstance(v, dict) and tensor is not None and isinstance(v.get("input_ids"), tensor):
            return int(v["input_ids"].shape[0])
    return None


def on_stack(frame, frame_id, code, limit=256):
    """Whether the frame ``frame_id`` of ``code`` is ``frame`` or one of its callers (the
    nearest ``limit``): a call still running, not one that ended by an exception."""
    while frame is not None and limit > 0:
        if id(frame) == frame_id and frame.f_code is code:
            return True
        frame, limit = frame.f_back, limit - 1
    return False


class _Monitor:
    """Per-call timings of chosen functions with ``sys.monitoring`` (Python >= 3.12).

    Local PY_START/PY_RETURN events on the matching code objects only. Nothing is monkeypatched.
    A plain function's call is timed only where it is the outermost call of its stage on its
    thread: the sub-modules' calls inside a model's forward, or the ``encode`` inside a
    tokenizer's ``__call__``, are part of that one call. The outermost call is known by its
    frame (a frame object is made on its start and its return only), so a call that raised
    needs no event: it ends when its frame returns, and the next call of its function whose
    callers do not hold that frame replaces it. A coroutine's (``async
    def``, an ASGI app's ``__call__``) interleave on the event loop's thread, so each is keyed
    by its frame: PY_START when it first runs, PY_RETURN / PY_UNWIND (global, turned on only
    for them) when it ends, its awaits in between. Calls on the ``ignore`` threads (the agent's
    own) are never timed.
    """

    def __init__(self, codes, push, filters=None, ignore=(), generations=None, returns=None):
        self.codes = dict(codes)
        #: generation.py's tracker and the codes it follows (generate, _prefill, the loops, the
        #: models' forwards): a generate call that is its thread's outermost forward is sent as
        #: its two parts, ``prefill`` and ``decode``
        self.gen = generations
        self.gen_codes = dict(generations.codes) if generations is not None else {}
        self.push = push  # push(native_tid, stage, start_ns, end_ns, request id or None)
        self.calls = 0  # named calls so far: the number in their request ids
        self.tool = None
        self.ignore = frozenset(ignore)
        #: ident -> {stage: [start ns (None: begun before the monitor), id(frame), code]}: the
        #: outermost call of each stage open on the thread, known by its frame
        self.open = {}
        self.natives = {}  # ident -> native thread id, for the call sampler
        #: code -> filter(frame): only calls that pass it are timed (known entry points)
        self.filters = dict(filters or {})
        #: code -> keep(return value): a plain call it is false for is not sent (LitServe's
        #: batch collection that took no request)
        self.returns = dict(returns or {})
        self.coroutines = {
            c for c in self.codes if c.co_flags & (_CO_COROUTINE | _CO_ASYNC_GENERATOR)
        }
        self.open_frames = {}  # id(frame) -> (code, start ns, ident) of running coroutines
        self.open_by_thread = {}  # ident -> coroutine calls open on it
        self.unwinding = False  # PY_UNWIND on (install, _start_keyed)
        #: threads whose calls running at install were looked for (``_adopt``, on its first event)
        self.adopted = set()

    @staticmethod
    def available():
        return hasattr(sys, "monitoring")

    def install(self):
        mon = sys.monitoring
        for tool in (mon.PROFILER_ID, 4, 3, 5):
            try:
                mon.use_tool_id(tool, "infertop")
            except ValueError:
                continue
            self.tool = tool
            break
        if self.tool is None:
            raise RuntimeError("no free sys.monitoring tool id")
        ev = mon.events
        mon.register_callback(self.tool, ev.PY_START, self._on_start)
        mon.register_callback(self.tool, ev.PY_RETURN, self._on_return)
        mon.register_callback(self.tool, ev.PY_UNWIND, self._on_unwind)
        for code in set(self.codes) | set(self.gen_codes):
            mon.set_local_events(self.tool, code, ev.PY_START | ev.PY_RETURN)
        # PY_UNWIND cannot be local: it fires for every frame an exception leaves, anywhere
        # (~660 a Hugging Face generate call: 3.6 % of a small model's), so only what needs it
        # turns it on, and only once it runs (``_start_keyed``): a process that imports an ASGI
        # framework but serves nothing with it (LitServe's inference worker) never has it, nor
        # the cost of its multiprocessing queue's exceptions (an ``Empty`` every millisecond).
        # (A crash of that worker was first put down to it; the cause was the walk of every
        # thread's stack at install: ``_adopt``.)
        self.unwinding = False
        return self.tool

    def _adopt(self, ident, frame):
        """Calls of this thread already running when the monitor started (a ``generate``
        halfway through at attach), found on the stack above ``frame`` (the thread's first
        event's caller), opened without a start: their ends time nothing, and the calls nested
        in them stay part of them rather than counting as calls of their own.

        Each thread looks at its own stack, on its own first event: never the agent's thread at
        every other thread's. On CPython 3.12.1 walking all the threads' frames from the agent's
        thread at install (``sys._current_frames()``, then ``f_back`` to the root) corrupted a
        LitServe inference worker's memory: "SystemError: deallocated BytesIO object has
        exported buffers", then its worker died, within 1 to 4 attaches in each of 8 runs;
        with the walk gone, none in 30 (docs/performance.md,
        scripts/stress/stress_attach_litserve.py)."""
        self.adopted.add(ident)
        outermost, gen = {}, None
        depth = 0
        while frame is not None and depth < 2000:
            code = frame.f_code
            stage = self.codes.get(code)
            if stage is not None and code not in self.coroutines and code not in self.filters:
                outermost[stage] = frame  # the last one found is the outermost
            if self.gen_codes.get(code) == "call":
                gen = frame
            frame, depth = frame.f_back, depth + 1
        if outermost:
            self.natives.setdefault(ident, threading.get_native_id())
            opened = self.open.setdefault(ident, {})
            for st, f in outermost.items():
                opened.setdefault(st, [None, id(f), f.f_code, None])
        if gen is not None and self.gen is not None:
            self.gen.adopt(ident, gen)

    def uninstall(self):
        if self.tool is None:
            return
        mon = sys.monitoring
        tool, self.tool = self.tool, None
        ev = mon.events
        try:
            mon.set_events(tool, 0)
            for code in set(self.codes) | set(self.gen_codes):
                try:
                    mon.set_local_events(tool, code, 0)
                except Exception:
                    pass
            for event in (ev.PY_START, ev.PY_RETURN, ev.PY_UNWIND):
                mon.register_callback(tool, event, None)
        finally:
            mon.free_tool_id(tool)
        self.open.clear()
        self.open_frames.clear()
        self.open_by_thread.clear()
        self.adopted.clear()

    def _on_start(self, code, offset):
        try:
            ident = threading.get_ident()
            if ident in self.ignore:
                return None
            if ident not in self.adopted:
                mine = frame_of(code)
                self._adopt(ident, mine.f_back if mine is not None else None)
            now = None
            kind = self.gen_codes.get(code)
            if kind is not None:
                now = time.perf_counter_ns()
                try:
                    self.gen.start(code, kind, now)
                except Exception:  # a generation not followed: its stage call still is
                    pass
            stage = self.codes.get(code)
            if stage is None:
                return None
            if code in self.coroutines or code in self.filters:
                return self._start_keyed(code, frame_of(code), ident)
            opened = self.open.get(ident)
            if opened is None:
                opened = self.open[ident] = {}
            if ident not in self.natives:  # (a thread adopted at install has its dict already)
                self.natives[ident] = threading.get_native_id()
            call = opened.get(stage)
            frame = None
            if call is not None:
                if code is not call[2]:
                    return None  # inside a call of its stage: part of that call
                frame = frame_of(code)
                if on_stack(frame.f_back, call[1], code):
                    return None  # the same function inside itself
                # else that call raised (its frame is gone): this one replaces it
            frame = frame or frame_of(code)
            size = None
            if stage == "forward" and self.gen_codes.get(code) != "call":
                size = batch_of(frame, code)  # once a call: its input's leading dimension
            opened[stage] = [now if now is not None else time.perf_counter_ns(), id(frame), code, size]
        except Exception:
            pass
        return None

    def _start_keyed(self, code, frame, ident):
        filt = self.filters.get(code)
        name = None
        if filt is not None:
            name = filt(frame)
            if not name:
                return None
        if self.open_frames and self._inside_keyed(frame, self.codes[code]):
            return None  # part of an outer call of its stage (a FastAPI app in Ray Serve's)
        if not self.unwinding and self.tool is not None:
            self.unwinding = True  # (its end may be an exception: _on_unwind)
            sys.monitoring.set_events(self.tool, sys.monitoring.events.PY_UNWIND)
        if ident not in self.natives:
            self.natives[ident] = threading.get_native_id()
        if len(self.open_frames) < 10000:
            self.open_frames[id(frame)] = (code, time.perf_counter_ns(), ident, name)
            self.open_by_thread[ident] = self.open_by_thread.get(ident, 0) + 1
        return None

    def _inside_keyed(self, frame, stage, limit=64):
        """Whether one of ``frame``'s callers (the nearest ``limit``: a running coroutine's are
        the ones awaiting it) is a keyed call of ``stage`` still open."""
        frame = frame.f_back if frame is not None else None
        while frame is not None and limit > 0:
            opened = self.open_frames.get(id(frame))
            if opened is not None and opened[0] is frame.f_code and self.codes.get(opened[0]) == stage:
                return True
            frame, limit = frame.f_back, limit - 1
        return False

    def _finish_keyed(self, code, frame):
        opened = self.open_frames.pop(id(frame), None)
        if opened is None or opened[0] is not code:
            return
        _, start, ident, name = opened
        left = self.open_by_thread.get(ident, 1) - 1
        if left > 0:
            self.open_by_thread[ident] = left
        else:
            self.open_by_thread.pop(ident, None)
        request = None
        if name is not None:
            self.calls += 1
            request = "%s #%d" % (name, self.calls)
        self.push(self.natives.get(ident, 0), self.codes[code], start, time.perf_counter_ns(), request)

    def _finish(self, code, now=None, retval=None):
        try:
            if code not in self.codes:
                return
            if code in self.coroutines or code in self.filters:
                self._finish_keyed(code, frame_of(code))
                return
            ident = threading.get_ident()
            opened = self.open.get(ident)
            stage = self.codes[code]
            call = opened.get(stage) if opened else None
            if call is None or call[2] is not code or id(frame_of(code)) != call[1]:
                return  # a call nested in one of its stage, or begun before the monitor did
            del opened[stage]
            if call[0] is None:  # began before the monitor did: not timed
                return
            keep = self.returns.get(code)
            size = call[3]
            if keep is not None:
                kept = keep(retval)
                if not kept:
                    return
                if type(kept) is int:  # the call's batch, as its return value tells it
                    size = kept
            native = self.natives.get(ident) or threading.get_native_id()
            end = now if now is not None else time.perf_counter_ns()
            first = None
            if self.gen is not None and self.gen_codes.get(code) == "call":
                first = self.gen.split_of(ident, call[0])
            if first is None:
                self.push(native, stage, call[0], end, None, size)
            else:  # a generation: its prefill, then its decode
                self.push(native, "prefill", call[0], first, None)
                self.push(native, "decode", first, end, None)
        except Exception:
            pass

    def _on_return(self, code, offset, retval):
        now = None
        kind = self.gen_codes.get(code)
        if kind is not None:
            try:
                now = time.perf_counter_ns()
                self.gen.finish(code, kind, retval, now)
            except Exception:
                pass
        self._finish(code, now, retval)
        return None

    def _on_unwind(self, code, offset, exc):
        """Only with coroutines or filtered entry points (an ASGI request that raised or was
        cancelled ends here): a plain call that raised needs no event (its stage's next call
        finds it gone from the stack)."""
        if code in self.coroutines or code in self.filters:
            self._finish(code)
        return None
