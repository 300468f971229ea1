"""Stage rules (``stage_functions``), the entry points timed without being told and the models'
forwards: the code objects ``monitor.py`` times."""

from __future__ import annotations

import collections
import sys
import threading
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.engine_stats import _vllm_stats
from infertop.agent.payload.patterns import StagePattern
from infertop.agent.payload.safe_reads import (
    CollectorOff,
    codes_down,
    subclasses_of,
    tracked_of_types,
)

# -- end --


def parse_stage_patterns(items):
    """[[stage, pattern], ...] -> [StagePattern] (patterns.py, the language infertop's own
    stage rules use); raises ValueError."""
    out = []
    if not isinstance(items, (list, tuple)):
        raise ValueError("stage_functions must be a list of [stage, pattern] pairs")
    for item in items:
        if (
            not isinstance(item, (list, tuple))
            or len(item) != 2
            or not all(isinstance(x, str) and x for x in item)
        ):
            raise ValueError("bad stage_functions entry %r: expected [stage, pattern]" % (item,))
        out.append(StagePattern(item[0], item[1]))
    return out


def match_stage(patterns, filename, qualname):
    """The stage of the first of ``patterns`` that names a function, else None."""
    for pattern in patterns:
        if pattern.matches(filename, qualname):
            return pattern.stage
    return None


def find_stage_codes(patterns):
    """{code object: stage} for every function object alive in this process that matches."""

    found = {}
    if not patterns:
        return found
    seen = set()
    for obj in functions_alive():
        code = obj.__code__
        if id(code) in seen:
            continue
        seen.add(id(code))
        qualname = getattr(code, "co_qualname", None) or getattr(obj, "__qualname__", code.co_name)
        stage = match_stage(patterns, code.co_filename, qualname)
        if stage is not None:
            found[code] = stage
    return found


#: entry points the agent times without being told, when their module is loaded (Python >=
#: 3.12): (stage, module, attribute path, filter). ``asgi_http``: only calls whose ``scope`` is
#: an HTTP request (not lifespan, not websocket); ``batch_taken``: only calls that returned a
#: non-empty batch (``_RETURN_FILTERS``). FastAPI's app calls Starlette's. Every plain
#: (not ``async``) timed function counts as one call only where it is the outermost of its
#: stage on its thread: a model's forward is one call, not one per sub-module; a tokenizer's
#: ``__call__`` and the ``encode`` inside it are one preprocess call.
KNOWN_ENTRY_POINTS = (
    ("request", "starlette.applications", "Starlette.__call__", "asgi_http"),
    # Hugging Face tokenizers through transformers (slow and fast); the Rust ``tokenizers``
    # package alone is C to sys.monitoring: its samples are preprocess, its calls untimed
    ("preprocess", "transformers.tokenization_utils_base", "PreTrainedTokenizerBase.__call__", None),
    ("preprocess", "transformers.tokenization_utils_base", "PreTrainedTokenizerBase.encode", None),
    ("preprocess", "transformers.tokenization_utils_base", "PreTrainedTokenizerBase.encode_plus", None),
    ("preprocess", "transformers.tokenization_utils_base", "PreTrainedTokenizerBase.batch_encode_plus", None),
    ("postprocess", "transformers.tokenization_utils_base", "PreTrainedTokenizerBase.decode", None),
    ("postprocess", "transformers.tokenization_utils_base", "PreTrainedTokenizerBase.batch_decode", None),
    # a whole generation (a model's forward: find_model_codes)
    ("forward", "transformers.generation.utils", "GenerationMixin.generate", None),
    # FastAPI's response: validated and serialized (to JSON bytes in pydantic's Rust core
    # where the endpoint declares its return type; else json.dumps, next, does the bytes)
    ("serialize", "fastapi.routing", "serialize_response", None),
    # the standard library's JSON encoder (a response's body; reading a request's is not
    # timed: a framework parses every body so, and its calls would swamp the tokenizer's)
    ("serialize", "json", "dumps", None),
    # LitServe's batch collection in its worker (``batch_timeout``): a batch's wait, counted
    # only where it returned requests (it runs every ``batch_timeout`` with none, idle)
    ("queue", "litserve.loops.base", "collate_requests", "batch_taken"),
    # Ray Serve: an HTTP request in a deployment's replica (its own process, the user's code
    # on the replica's user-code thread), from the proxy's hand-over to the replica's reply; a
    # FastAPI ingress's own ``__call__`` inside it is the same request (``_start_keyed``)
    ("request", "ray.serve._private.replica", "UserCallableWrapper._call_http_entrypoint", "asgi_http"),
    # vLLM's engine step in its engine core (scheduling, the worker's forward and sampling,
    # the update from its output): one call a step, sent only where it ran the model
    ("step", "vllm.v1.engine.core", "EngineCore.step", "step_ran"),
    # ... and in its model worker the model's forward, one call a step (vLLM's own modules'
    # forwards, its sampler's among them, are not timed as models: MODEL_FILES_NOT_TIMED)
    ("forward", "vllm.v1.worker.gpu_model_runner", "GPUModelRunner._model_forward", None),
    # ... and in its API process each finished request as vLLM's own stats saw it (its
    # arrival; its engine core's queued, scheduled, first and last token times): read, not
    # timed (``_vllm_finished``), and sent as that request's parts under vLLM's request id
    ("request", "vllm.v1.metrics.stats", "IterationStats.update_from_finished_request", "vllm_finished"),
    ("step", "vllm.v1.engine.core", "EngineCore.step_with_batch_queue", "step_ran"),
    # ... and each engine step's scheduler state where its API process records its metrics
    # (requests running and waiting, KV-cache usage, tokens, preemptions): read, not timed
    # (``_vllm_stats``), summed per engine and sent as ``engine`` messages
    ("request", "vllm.v1.metrics.loggers", "StatLoggerManager.record", "vllm_stats"),
    # a WSGI app's requests (gunicorn's sync and gthread workers, werkzeug's server, any WSGI
    # server): from the app's call to the server's close of its response iterable (the body
    # written), timed by a wrapper on every Python (``wrappers.py``: the end is not a return)
    ("request", "flask.app", "Flask.wsgi_app", "wsgi"),
    ("request", "django.core.handlers.wsgi", "WSGIHandler.__call__", "wsgi"),
)
#: framework base classes whose subclasses' handler methods the agent times the same way:
#: (module, class, ((method, stage), ...)); only methods a subclass defines itself (the user's)
KNOWN_HANDLERS = (
    ("litserve.api", "LitAPI", (("decode_request", "preprocess"), ("predict", "forward"),
                                ("encode_response", "serialize"))),
)
#: classes a framework finds by name, not by base class: (class name, ((method, stage), ...)).
#: Triton's Python backend loads the user's ``model.py`` and calls its ``TritonPythonModel``'s
#: ``execute`` with a batch of requests; its stub puts the class on ``sys`` (older stubs
#: import ``<version>.model``): looked for there and in every loaded module
KNOWN_CLASSES = (("TritonPythonModel", (("execute", "forward"),)),)
_CO_COROUTINE = 0x0080
_CO_ASYNC_GENERATOR = 0x0200


def find_known_codes(models=None):
    """{code: (stage, filter name or None)} of the KNOWN_ENTRY_POINTS whose modules are
    loaded, of the models' forwards (``models``, else find_model_codes), and of the
    KNOWN_HANDLERS its subclasses define."""
    found = {}
    for stage, module, path, filt in KNOWN_ENTRY_POINTS:
        code = _code_of(sys.modules.get(module), path)
        if code is not None:
            found.setdefault(code, (stage, filt))
    if models is None:
        try:
            models = find_model_codes()
        except Exception:  # an odd object in the heap: no model timed, the rest still is
            models = []
    for code in models:
        found.setdefault(code, ("forward", None))
    for module, cls_name, methods in KNOWN_HANDLERS:
        base = getattr(sys.modules.get(module), cls_name, None)
        for cls in _subclasses(base) if isinstance(base, type) else ():
            for meth, stage in methods:
                code = getattr(cls.__dict__.get(meth), "__code__", None)
                if code is not None:
                    found[code] = (stage, None)
    for cls in _classes_named(name for name, _ in KNOWN_CLASSES):
        for meth, stage in dict(KNOWN_CLASSES)[cls.__name__]:
            code = _unwrapped_code(cls.__dict__.get(meth))
            if code is not None:
                found.setdefault(code, (stage, None))
    return found


def _classes_named(names):
    """The classes called one of ``names`` on ``sys`` or at the top of a loaded module, each
    once (a module's ``__dict__`` read: no module ``__getattr__`` runs)."""
    names = set(names)
    out = []
    for mod in [sys, *list(sys.modules.values())]:
        if not isinstance(mod, type(sys)):  # an odd object put in sys.modules: not read
            continue
        space = mod.__dict__
        for name in names:
            cls = space.get(name)
            if isinstance(cls, type) and cls.__name__ == name and cls not in out:
                out.append(cls)
    return out


#: at most this many model classes' forwards are timed
MAX_MODEL_CODES = 16
#: root modules whose forward is not timed as a model's: an engine that calls its model
#: through an entry point timed by name (vLLM's ``_model_forward``), whose other root modules
#: (its sampler, its logits processors) are steps of its own, not models
MODEL_FILES_NOT_TIMED = ("/vllm/",)


def _timed_as_model(code):
    return not any(part in code.co_filename for part in MODEL_FILES_NOT_TIMED)


def find_model_codes():
    """The code of the ``forward`` of every model alive in this process: a torch module that
    holds sub-modules and that no other module holds (a root). Only the roots' classes: timing
    every module's call (``Module._wrapped_call_impl``) fires at each of the ~100 sub-module
    calls of a forward, 1.5 us each (docs/performance.md); a root's forward fires once per call,
    and another instance of its class nested somewhere is merged into the outer call. A model
    built after the agent was configured, or held in a frozen heap, is timed once the agent sees
    its forward run (``models_on_stacks``)."""
    mod = sys.modules.get("torch.nn.modules.module")
    base = getattr(mod, "Module", None)
    if not isinstance(base, type):
        return []
    unimplemented = getattr(mod, "_forward_unimplemented", None)
    # by their exact types, not isinstance(): that reads ``__class__``, which a proxy object may
    # compute (torch.distributed's deprecated ``reduce_op`` warns on the target's stderr). The
    # collector's list only: a frozen heap's models are found on the stacks as they run
    # (models_on_stacks), which costs nothing like a walk of millions of objects
    modules = tracked_of_types(subclasses_of(base))
    held = set()
    for m in modules:
        subs = m.__dict__.get("_modules") or {}
        held.update(id(c) for c in subs.values() if c is not None)
    codes = []
    for m in modules:
        if id(m) in held or not m.__dict__.get("_modules"):
            continue
        forward = getattr(type(m), "forward", None)
        if forward is None or forward is unimplemented:
            continue
        code = _unwrapped_code(forward)
        if code is not None and code not in codes and _timed_as_model(code):
            codes.append(code)
            if len(codes) >= MAX_MODEL_CODES:
                break
    return codes


def _code_of(obj, path):
    """The code object of the function at ``path`` in ``obj``, under its decorators, else
    None."""
    for part in path.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    return _unwrapped_code(obj)


def _unwrapped_code(obj):
    """The code of function ``obj`` under its decorators (``generate`` is wrapped in
    ``torch.no_grad``: the wrapper's code is shared by every function so decorated)."""
    for _ in range(10):
        inner = getattr(obj, "__wrapped__", None) if obj is not None else None
        if inner is None:
            break
        obj = inner
    return getattr(obj, "__code__", None)


def _subclasses(base, limit=200):
    """Every subclass of ``base``, breadth first, at most ``limit``."""
    out, todo = [], [base]
    while todo and len(out) < limit:
        try:
            subs = type.__subclasses__(todo.pop(0))
        except Exception:
            continue
        out.extend(subs)
        todo.extend(subs)
    return out[:limit]


def _asgi_http(frame):
    """The request's method and path ("POST /embed") for an HTTP scope, else None."""
    scope = frame.f_locals.get("scope")
    if not isinstance(scope, dict) or scope.get("type") != "http":
        return None
    return ("%s %s" % (scope.get("method") or "?", scope.get("path") or "/"))[:200]


def _wsgi_http(frame):
    """A WSGI request's method and path ("GET /predict") from its ``environ``, else None."""
    environ = frame.f_locals.get("environ")
    if not isinstance(environ, dict) or "REQUEST_METHOD" not in environ:
        return None
    path = (environ.get("SCRIPT_NAME") or "") + (environ.get("PATH_INFO") or "/")
    return ("%s %s" % (environ.get("REQUEST_METHOD") or "?", path or "/"))[:200]


#: filters whose calls end when the server closes what they return (a WSGI response
#: iterable), not when they return: always timed by wrappers (``wrappers.py``)
BODY_FILTERS = ("wsgi",)


#: vLLM's finished requests read by ``_vllm_finished``, until the agent sends them: (native
#: tid, unix s at the read, arrival unix s, queued, scheduled, first token, last token (the
#: engine core's time.monotonic() s: perf_counter's clock on Linux), first-token latency s,
#: prompt tokens, new tokens, vLLM's request id)
ENGINE_REQUESTS: collections.deque[tuple] = collections.deque(maxlen=20000)


def _vllm_finished(frame):
    """vLLM's ``IterationStats.update_from_finished_request(..., request_id,
    num_prompt_tokens, ..., req_stats)``: the request's own stats, kept for the agent to send;
    the call is not timed (None). Only the frame's arguments and a dataclass's fields are
    read."""
    loc = frame.f_locals
    st = loc.get("req_stats")
    if st is None:
        return None
    ENGINE_REQUESTS.append((
        threading.get_native_id(), time.time(), float(st.arrival_time), float(st.queued_ts),
        float(st.scheduled_ts), float(st.first_token_ts), float(st.last_token_ts),
        float(getattr(st, "first_token_latency", 0.0) or 0.0),
        int(loc.get("num_prompt_tokens") or 0), int(st.num_generation_tokens),
        str(loc.get("request_id"))[:200],
    ))  # fmt: skip
    return None


#: filters a known entry point's call must pass to be timed (called with its frame): what
#: they return names the call (its request id is that name and a number: "POST /embed #17"),
#: and a call they return nothing for is not timed
_CALL_FILTERS = {"asgi_http": _asgi_http, "vllm_finished": _vllm_finished, "vllm_stats": _vllm_stats,
                 "wsgi": _wsgi_http}  # fmt: skip


def _batch_taken(retval):
    """LitServe's ``collate_requests`` returns (payloads, timed-out ids): a batch if payloads."""
    return type(retval) is tuple and len(retval) == 2 and bool(retval[0])


def _step_ran(retval):
    """vLLM's engine step returns ({client: EngineCoreOutputs}, whether the model ran): a step
    that ran it is sent, with its batch (the requests it gave an output) where it has one."""
    if not (type(retval) is tuple and len(retval) == 2 and retval[1] is True):
        return False
    outputs = retval[0]
    n = 0
    for out in outputs.values() if type(outputs) is dict else ():
        got = getattr(out, "outputs", None)
        n += len(got) if type(got) is list else 0
    return n or True


#: filters a known entry point's call must pass when it returns (called with its return
#: value): a call they are false for is not sent
_RETURN_FILTERS = {"batch_taken": _batch_taken, "step_ran": _step_ran}


def functions_alive():
    """The functions alive in this process that the agent looks through for stage and
    generation functions: the collector's (``tracked_of_types``: never the whole heap held),
    and where the process froze its heap (``gc.freeze()``: vLLM's processes, a Ray Serve
    replica after its deployment's ``__init__``, pre-forking servers) the functions the loaded
    modules define (``loaded_functions``), which ``gc.get_objects()`` leaves out. A frozen
    heap's models are found on the threads' stacks as they run (``models_on_stacks``), not by
    walking it."""
    import gc
    import types

    functions = tracked_of_types((types.FunctionType,))
    if gc.get_freeze_count() >= MIN_FROZEN:
        functions.extend(loaded_functions())
    return functions


#: a heap with fewer frozen objects than this was not frozen by its program (Python 3.12 starts
#: with a few hundred; a Serve replica froze 450,000, a vLLM engine core millions)
MIN_FROZEN = 10_000
#: the most functions ``loaded_functions`` lists (a bound on its time)
MAX_LOADED_FUNCTIONS = 500_000
#: the share of one core the agent's thread may take while it looks through a frozen heap's
#: modules: it sleeps the rest (time.thread_time: its own CPU, measured, not assumed)
DISCOVERY_CPU_SHARE = 0.2
#: ... in steps of at most this much of its CPU (the target's threads take the GIL between)
DISCOVERY_STEP_S = 0.002


class Paced:
    """Work done in steps on the agent's thread at most ``share`` of a core: ``step()`` after
    each small piece sleeps off what the thread's CPU (``time.thread_time``) ran past
    ``step_s``; the sleep lets go of the GIL and of the CPU."""

    def __init__(self, share=DISCOVERY_CPU_SHARE, step_s=DISCOVERY_STEP_S):
        import time

        self.share = share
        self.step_s = step_s
        self.mark = time.thread_time()
        self.cpu_s = 0.0  # the work's CPU so far
        self.slept_s = 0.0

    def step(self):
        import time

        spent = time.thread_time() - self.mark
        if spent < self.step_s:
            return
        self.cpu_s += spent
        pause = spent * (1.0 / self.share - 1.0)
        time.sleep(pause)
        self.slept_s += pause
        self.mark = time.thread_time()


def loaded_functions(limit=None, pace=None):
    """The functions the loaded modules define: at their top level and in their classes
    (methods, static and class methods, properties' accessors, nested classes), with what
    their decorators wrap; each once, at most ``limit``. Only module and class dictionaries
    are read (no attribute lookup runs the target's code), paced (``Paced``)."""
    import types

    cap = MAX_LOADED_FUNCTIONS if limit is None else limit
    pace = pace or Paced()
    func = types.FunctionType
    out, seen_classes = [], set()
    classes = []

    def take(value):
        t = type(value)
        if t is func:
            out.append(value)
            inner = value.__dict__.get("__wrapped__") if value.__dict__ else None
            if type(inner) is func:
                out.append(inner)
        elif t is staticmethod or t is classmethod:
            take(value.__func__)
        elif t is property:
            for f in (value.fget, value.fset):
                if type(f) is func:
                    out.append(f)
        # issubclass of its type, not isinstance: that reads ``__class__``, which a proxy may
        # compute (torch.distributed's deprecated ``reduce_op`` warns on the target's stderr)
        elif issubclass(t, type) and id(value) not in seen_classes:
            seen_classes.add(id(value))
            classes.append(value)

    modules = [m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)]
    for i, mod in enumerate(modules):
        if len(out) >= cap:
            return out[:cap]
        for value in list(mod.__dict__.values()):
            take(value)
        if i % 20 == 0:
            pace.step()
    i = 0
    while i < len(classes) and len(out) < cap:
        try:
            space = list(type.__dict__["__dict__"].__get__(classes[i]).values())
        except Exception:
            space = []
        for value in space:
            take(value)
        i += 1
        if i % 50 == 0:
            pace.step()
    return out[:cap]


#: torch's module call, whose callee is a model's forward (``model(x)``)
_MODULE_FILE = "/torch/nn/modules/module.py"
_CALL_IMPLS = ("_call_impl", "_wrapped_call_impl")


def models_on_stacks(frames, ignore=()):
    """The code of each thread's outermost running ``forward`` that a torch module's call
    (``Module._call_impl``) called, up to five decorators between them (transformers wraps a
    model's forward in three): the root model's forward, as ``find_model_codes`` would time it.
    ``frames``: ``sys._current_frames()``; ``ignore``: thread idents not to look at (the
    agent's). Only code objects are read, each stack's in one C call with the collector off
    (safe_reads.py)."""
    stacks = []
    with CollectorOff():
        for ident, frame in frames.items():
            if ident not in ignore:
                stacks.append(codes_down(frame, 512))
        frame = None
    found = []
    for codes in stacks:
        outer = None
        for i, code in enumerate(codes):
            if code.co_name == "forward" and _called_by_module(codes[i + 1 : i + 7]):
                outer = code
        # an engine's own model (vLLM's) is timed by its entry point: nothing inside it is
        if outer is not None and outer not in found and _timed_as_model(outer):
            found.append(outer)
    return found


def _called_by_module(callers):
    """Whether one of ``callers`` (codes, the nearest first) is a torch module's call."""
    return any(c.co_name in _CALL_IMPLS and c.co_filename.endswith(_MODULE_FILE) for c in callers)
