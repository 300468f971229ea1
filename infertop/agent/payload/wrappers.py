"""The timer of Python 3.10 and 3.11 (no ``sys.monitoring``): the functions whose code objects
``stages.py`` finds are wrapped in place, where the target looks them up -- a class's method in
its class dictionary, a module's function in its module dictionary (and in the other modules
that imported that function object by name) -- and restored on detach. It feeds the same
spans, call-sampler threads and generation tracker the monitor (``monitor.py``) feeds.

What it cannot reach: a reference the target took before the agent came (a bound method kept
in a variable, ``f = module.func`` inside a function, a callback already registered), a
function defined inside another one, and C functions; and it leaves alone the methods of a
model that runs under ``torch.compile`` (``compiled_model_classes``). Their samples still say
their stage.
"""

from __future__ import annotations

import sys
import threading
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.monitor import batch_of, on_stack
from infertop.agent.payload.stages import _CO_ASYNC_GENERATOR, _CO_COROUTINE
from infertop.agent.payload.wrap_slots import _function_of, _Slot, find_slots, model_instances

# -- end --

_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08
_CO_GENERATOR = 0x20
#: the first thread look of each thread walks its stack at most this deep (calls already
#: running when the wrappers went in)
ADOPT_DEPTH = 2000


class _ArgsView:
    """A call's arguments by their parameter names, as a frame's ``f_locals`` would have them
    at the call's start (read by the filters, ``batch_of`` and the generation tracker): the
    positional ones by the timed code's names, the keyword ones by theirs and, all together,
    under the name of its ``**kwargs``. Built when first read."""

    __slots__ = ("f_code", "args", "kwargs", "local")

    def __init__(self, code, args, kwargs):
        self.f_code = code
        self.args = args
        self.kwargs = kwargs
        self.local = None

    @property
    def f_locals(self):
        local = self.local
        if local is None:
            code, kwargs = self.f_code, self.kwargs
            n = code.co_argcount
            local = dict(zip(code.co_varnames[:n], self.args))
            if kwargs:
                local.update(kwargs)
                if code.co_flags & _CO_VARKEYWORDS:
                    i = n + code.co_kwonlyargcount + (1 if code.co_flags & _CO_VARARGS else 0)
                    if i < len(code.co_varnames):
                        local[code.co_varnames[i]] = kwargs
            self.local = local
        return local


class _BoundArgsView(_ArgsView):
    """The arguments of a call made without the ``self`` its code names first."""

    __slots__ = ()

    def __init__(self, code, args, kwargs):
        super().__init__(code, (None, *args), kwargs)


class _ResponseBody:
    """A WSGI response iterable, passed through: iterating it is iterating the app's;
    ``close()`` closes the app's and then ends the request (``done``), once."""

    __slots__ = ("body", "done")

    def __init__(self, body, done):
        self.body = body
        self.done = done

    def __iter__(self):
        return iter(self.body)

    def close(self):
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            done, self.done = self.done, None
            if done is not None:
                done()


class _Wrappers:
    """Per-call timings of chosen functions by wrapping them in place (Python < 3.12).

    The same contract as ``_Monitor``: ``codes`` {code: stage}, ``push(native tid, stage,
    start ns, end ns, request, batch)``, ``filters`` {code: filter(call) -> name or None},
    ``returns`` {code: keep(return value)}, ``ignore`` thread idents, ``generations`` the
    tracker. A plain call is sent only where it is the outermost call of its stage on its
    thread (``open``: thread -> {stage: [start ns, frame id, code, batch]}; a call that raises
    is closed by its wrapper); a coroutine's (an ASGI request) is keyed by its task's context
    (``contextvars``: the stages of the keyed calls it is inside). Calls running when the
    wrappers went in are found on each thread's own stack at its first timed call: their
    nested calls stay part of them. ``install`` replaces the dictionary entries
    (``find_slots``) and ``uninstall`` puts back every one that still holds its wrapper."""

    def __init__(self, codes, push, filters=None, ignore=(), generations=None, returns=None, bodies=()):
        self.codes = dict(codes)
        #: codes whose call ends when the server closes the response iterable it returned (a
        #: WSGI app's): a call's span is sent then, from the wrapper around that iterable
        self.bodies = frozenset(bodies)
        self.gen = generations
        self.gen_codes = dict(generations.codes) if generations is not None else {}
        self.push = push
        self.calls = 0
        self.tool = None  # (the monitor's; ``on`` says whether the wrappers time)
        self.on = False
        self.ignore = frozenset(ignore)
        self.open = {}
        self.natives = {}
        self.filters = dict(filters or {})
        self.returns = dict(returns or {})
        self.open_by_thread = {}  # ident -> keyed (coroutine) calls open on it
        self.adopted = set()
        self.slots = []
        self.unreached = []  # codes no dictionary entry was found for
        self.failed = []  # (name, why) of entries that could not be replaced
        self.failed_codes = {}  # name -> its code, for the stage the note names it with
        self.keyed = None

    @staticmethod
    def available():
        return True

    def stage_of(self, code):
        """The stage a code is timed as, for the notes: a generation call's two parts."""
        if code in self.codes:
            return self.codes[code]
        return "prefill/decode" if self.gen_codes.get(code) == "call" else "forward"

    # -- in and out ---------------------------------------------------------------------------

    def install(self):
        import contextvars

        self.keyed = contextvars.ContextVar("infertop_keyed_stages", default=frozenset())
        import types

        targets = set(self.codes) | set(self.gen_codes)
        found = find_slots(targets)
        try:
            classes, hooked = model_instances(targets)
            compiled = {id(c) for c in classes}
        except Exception:  # an odd object in the heap: none known
            compiled, hooked = set(), []
        found = found + [(m, "forward", own, code) for m, own, code in hooked if id(type(m)) not in compiled]
        reached = set()
        wrappers = {}  # id(original function) -> its wrapper: aliases share one
        self.on = True
        for holder, name, value, code in found:
            if id(holder) in compiled:
                self.failed.append(("%s.%s" % (holder.__name__, name), "compiled with torch.compile"))
                self.failed_codes["%s.%s" % (holder.__name__, name)] = code
                continue
            got = _function_of(value, types.FunctionType)
            if got is None:  # an instance's own forward (a hook's partial): called without self
                fn, kind = value, "instance"
            else:
                fn, kind = got
            wrapper = wrappers.get(id(fn))
            if wrapper is None:
                wrapper = self._wrap(fn, code, bound=kind == "instance")
                if wrapper is None:
                    self.failed.append((name, "a generator, or a coroutine under a plain decorator"))
                    self.failed_codes[name] = code
                    continue
                wrappers[id(fn)] = wrapper
            slot = _Slot(holder, name, value)
            if kind in ("function", "instance"):
                put = wrapper
            else:
                put = (staticmethod if kind == "static" else classmethod)(wrapper)
            try:
                if slot.space().get(name) is not value:
                    continue  # changed while we looked
                slot.put(put)
            except Exception as exc:  # a read-only type, an odd module
                self.failed.append((name, repr(exc)[:200]))
                self.failed_codes[name] = code
                continue
            slot.wrapper = put
            self.slots.append(slot)
            reached.add(code)
        self.unreached = [c for c in targets if c not in reached]
        self.tool = "wrappers"
        return self.tool

    def uninstall(self):
        """Every entry that still holds its wrapper gets its original object back (one the
        target replaced since is left as the target made it); wrappers the target kept
        references to call their function untimed from now on."""
        self.on = False
        slots, self.slots = self.slots, []
        for slot in reversed(slots):
            try:
                if slot.space().get(slot.name) is slot.wrapper:
                    slot.put(slot.original)
            except Exception:
                pass
        self.tool = None
        self.open.clear()
        self.open_by_thread.clear()
        self.adopted.clear()

    # -- the wrappers -------------------------------------------------------------------------

    def _wrap(self, fn, code, bound=False):
        """A wrapper of ``fn`` (which runs ``code``); ``bound``: it is called without the
        ``self`` its code names first (a hook's partial of a bound method)."""
        own = getattr(fn, "__code__", None)
        flags = own.co_flags if own is not None else code.co_flags
        if (flags | code.co_flags) & (_CO_ASYNC_GENERATOR | _CO_GENERATOR):
            return None  # a generator: its call returns before its work
        if flags & _CO_COROUTINE:
            wrapper = self._keyed_wrapper(fn, code)
        elif code.co_flags & _CO_COROUTINE:
            return None  # a coroutine behind a plain decorator: its call ends before its work
        else:
            wrapper = self._plain_wrapper(fn, code, bound)
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                setattr(wrapper, attr, getattr(fn, attr))
            except Exception:
                pass
        try:
            wrapper.__dict__.update(fn.__dict__)
        except Exception:
            pass
        wrapper.__wrapped__ = fn  # inspect.signature reads the function's own signature
        return wrapper

    def _thread(self, ident, frame):
        """A thread's first timed call: its native id, and the calls of timed functions
        already running on its stack above ``frame`` (the outermost of each stage), opened
        without a start: their ends time nothing, and the calls nested in them stay part of
        them."""
        self.adopted.add(ident)
        self.natives.setdefault(ident, threading.get_native_id())
        opened = self.open.setdefault(ident, {})
        depth = 0
        while frame is not None and depth < ADOPT_DEPTH:
            code = frame.f_code
            stage = self.codes.get(code)
            if stage is not None and not code.co_flags & (_CO_COROUTINE | _CO_ASYNC_GENERATOR):
                opened[stage] = [None, id(frame), code, None]  # the last found: outermost
            frame, depth = frame.f_back, depth + 1
        return opened

    def _plain_wrapper(self, fn, code, bound=False):
        timer = self
        view_of = _BoundArgsView if bound else _ArgsView
        stage = self.codes.get(code)
        kind = self.gen_codes.get(code)
        filt = self.filters.get(code)
        keep = self.returns.get(code)
        body = code in self.bodies
        sized = stage == "forward" and kind != "call"
        get_ident = threading.get_ident
        clock = time.perf_counter_ns
        getframe = sys._getframe

        def infertop_timed(*args, **kwargs):
            if not timer.on:
                return fn(*args, **kwargs)
            ident = get_ident()
            opened = timer.open.get(ident)
            if opened is None:
                if ident in timer.ignore:
                    return fn(*args, **kwargs)
                opened = timer._thread(ident, getframe(1))
            me, now, gen = None, None, None
            if kind is not None:
                gen = timer.gen
                if kind == "call" or ident in gen.open:  # (a forward outside one: nothing)
                    me, now = getframe(), clock()
                    try:
                        gen.start(code, kind, now, me, view_of(code, args, kwargs))
                    except Exception:  # a generation not followed: its stage call still is
                        gen = None
                else:
                    gen = None
            call = None
            if stage is not None:
                call = opened.get(stage)
                if call is not None and call[0] is None and not on_stack(getframe(1), call[1], call[2], ADOPT_DEPTH):
                    del opened[stage]  # a call running at install has ended
                    call = None
                if call is not None and body and call[1] == "body":
                    del opened[stage]  # a response its server never closed: given up
                    call = None
                if call is not None:
                    call = None  # inside a call of its stage: part of it
                else:
                    name = None
                    view = None
                    if filt is not None:
                        view = view_of(code, args, kwargs)
                        try:
                            name = filt(view)
                        except Exception:
                            name = None
                    if filt is None or name:
                        size = None
                        if sized:
                            size = batch_of(view or view_of(code, args, kwargs), code)
                        call = opened[stage] = [now if now is not None else clock(), None, code, size, name]
            try:
                ret = fn(*args, **kwargs)
            except BaseException:
                if call is not None and opened.get(stage) is call:
                    del opened[stage]
                raise
            end = clock()
            if gen is not None:
                try:
                    gen.finish(code, kind, ret, end, me)
                except Exception:
                    pass
            if call is not None:
                if body:
                    return timer._body(ident, opened, stage, call, ret, args, kwargs, code)
                timer._finish(ident, opened, stage, call, end, ret, keep)
            return ret

        return infertop_timed

    def _body(self, ident, opened, stage, call, ret, args, kwargs, code):
        """A WSGI app's response: passed on in a wrapper whose ``close()`` (the server calls it
        once the body is written, PEP 3333) ends the request; a file the server may send
        itself (``wsgi.file_wrapper``) ends it now."""
        try:
            environ = _ArgsView(code, args, kwargs).f_locals.get("environ")
            sendable = environ.get("wsgi.file_wrapper") if isinstance(environ, dict) else None
            if isinstance(sendable, type) and isinstance(ret, sendable):
                self._finish(ident, opened, stage, call, time.perf_counter_ns(), ret, None)
                return ret
            call[1] = "body"  # open until its server closes it
            clock = time.perf_counter_ns
            return _ResponseBody(ret, lambda: self._finish(ident, opened, stage, call, clock(), None, None))
        except Exception:
            return ret

    def _finish(self, ident, opened, stage, call, end, ret, keep):
        try:
            if opened.get(stage) is call:
                del opened[stage]
            size = call[3]
            if keep is not None:
                kept = keep(ret)
                if not kept:
                    return
                if type(kept) is int:
                    size = kept
            native = self.natives.get(ident) or threading.get_native_id()
            request = None
            if call[4]:
                self.calls += 1
                request = "%s #%d" % (call[4], self.calls)
            first = None
            if self.gen is not None and self.gen_codes.get(call[2]) == "call":
                first = self.gen.split_of(ident, call[0])
            if first is None:
                self.push(native, stage, call[0], end, request, size)
            else:  # a generation: its prefill, then its decode
                self.push(native, "prefill", call[0], first, None)
                self.push(native, "decode", first, end, None)
        except Exception:
            pass

    def _keyed_wrapper(self, fn, code):
        """A coroutine function (an ASGI app's ``__call__``): interleaved on its loop's thread,
        so its calls are known by their task's context, not by their thread."""
        timer = self
        stage = self.codes.get(code)
        filt = self.filters.get(code)
        get_ident = threading.get_ident
        clock = time.perf_counter_ns

        async def infertop_timed_async(*args, **kwargs):
            if not timer.on or stage is None:
                return await fn(*args, **kwargs)
            ident = get_ident()
            if ident in timer.ignore:
                return await fn(*args, **kwargs)
            name = None
            if filt is not None:
                try:
                    name = filt(_ArgsView(code, args, kwargs))
                except Exception:
                    name = None
                if not name:
                    return await fn(*args, **kwargs)
            keyed = timer.keyed
            inside = keyed.get()
            if stage in inside:
                return await fn(*args, **kwargs)  # part of an outer call of its stage
            token = keyed.set(inside | {stage})
            timer.natives.setdefault(ident, threading.get_native_id())
            timer.open_by_thread[ident] = timer.open_by_thread.get(ident, 0) + 1
            start = clock()
            try:
                return await fn(*args, **kwargs)
            finally:
                end = clock()
                try:
                    keyed.reset(token)
                except Exception:  # resumed in another context: it ends with this call
                    pass
                left = timer.open_by_thread.get(ident, 1) - 1
                if left > 0:
                    timer.open_by_thread[ident] = left
                else:
                    timer.open_by_thread.pop(ident, None)
                if timer.on:
                    request = None
                    if name is not None:
                        timer.calls += 1
                        request = "%s #%d" % (name, timer.calls)
                    try:
                        timer.push(timer.natives.get(ident, 0), stage, start, end, request)
                    except Exception:
                        pass

        return infertop_timed_async
