"""Generation calls, timed one by one with ``sys.monitoring`` (Python >= 3.12): a Hugging Face
``generate`` call (or a function the user names with ``--generate``) from its start to its
first new token (``prefill``) and to its end (``decode``), with its batch size, prompt and new
tokens and the bytes its KV cache holds at the end (docs/generation.md).

The ``_Monitor`` (stages.py) hands this tracker the events of two kinds of code object: the
calls (``generate``, or the named function) and the models' root forwards (the ones the stage
timer times anyway). The first forward inside a call is the prompt's: its input ids give the
batch and prompt length and the cache it is handed is the one the call fills; the second
forward's start is the first token (chosen, logits processed and the stopping criteria and a
streamer called, just before the second step begins). So nothing fires per token but the
forward's own two events. Only the outermost call on a thread counts: an assistant model's
``generate`` inside assisted decoding is part of the call around it.
"""

from __future__ import annotations

import sys
import threading

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.monitor import frame_of, on_stack
from infertop.agent.payload.stages import _unwrapped_code, functions_alive, match_stage

# -- end --

#: (kind, module, attribute path) the agent follows in a generation, when loaded: the call;
#: inside it the models' forwards (found as the stage timer finds them) give the rest
GENERATION_POINTS = (("call", "transformers.generation.utils", "GenerationMixin.generate"),)
#: calls finished and not yet sent, at most
MAX_GENERATIONS_BUFFERED = 20000
#: user ``generate_functions`` patterns may name at most this many functions
MAX_GENERATE_FUNCTIONS = 50


def _code_at(module, path):
    obj = sys.modules.get(module)
    for part in path.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    return _unwrapped_code(obj)


def find_generation_codes(patterns=(), model_codes=(), known=True):
    """{code: kind} of the generation points loaded in this process (``known``), the
    functions the user's ``patterns`` (``StagePattern``s as parse_stage_patterns gives, stage
    ignored) name as calls, and ``model_codes`` as forwards."""
    found = {}
    for kind, module, path in GENERATION_POINTS if known else ():
        code = _code_at(module, path)
        if code is not None:
            found.setdefault(code, kind)
    if patterns:
        n = 0
        for obj in functions_alive():
            code = obj.__code__
            if code in found:
                continue
            qualname = getattr(code, "co_qualname", None) or getattr(
                obj, "__qualname__", code.co_name
            )
            if match_stage(patterns, code.co_filename, qualname):
                found[code] = "call"
                n += 1
                if n >= MAX_GENERATE_FUNCTIONS:
                    break
    for code in model_codes:
        found.setdefault(code, "forward")
    return found


def transformers_warning(codes):
    """What to say once when the target's transformers is one whose generate the agent does not
    know (its calls then go untimed, or timed by the names it had; the samples' prefill and
    decode come from the stack rules alone); None when it knows it, or none is loaded."""
    tf = sys.modules.get("transformers")
    if tf is None or sys.modules.get("transformers.generation.utils") is None:
        return None  # no generation loaded: nothing to follow
    version = str(getattr(tf, "__version__", "?"))
    if "call" not in set(codes.values()):
        why = "its GenerationMixin.generate was not found"
    elif version.split(".")[0] not in ("4", "5"):
        why = "a version the agent does not know (it knows 4.4x and 5.x)"
    else:
        return None
    return (
        "transformers %s: %s; generation calls may go untimed, prefill and decode come from "
        "the stack rules" % (version, why)
    )


def _shape_of(value):
    """(batch, length) of a tensor of ids (length None for one dimension), else None."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None) if torch is not None else None
    if tensor is None or not isinstance(value, tensor):
        return None
    shape = tuple(value.shape)
    if not shape:
        return None
    return (int(shape[0]), int(shape[1]) if len(shape) > 1 else None)


def _input_shape(frame, code):
    """The (batch, length) of a call's input ids: ``input_ids`` (an argument, or in its
    ``**kwargs``: ``generate(**tokenizer(...))``), else its first tensor argument."""
    try:
        local = frame.f_locals
    except Exception:
        return None
    shape = _shape_of(local.get("input_ids"))
    if shape is None:
        kwargs = local.get("kwargs")
        if isinstance(kwargs, dict):
            shape = _shape_of(kwargs.get("input_ids"))
    for name in code.co_varnames[: min(code.co_argcount, 8)] if shape is None else ():
        shape = _shape_of(local.get(name))
        if shape is not None:
            break
    return shape


def _cache_of(frame):
    """The KV cache a model forward is handed (``cache`` in transformers 5, ``past_key_values``
    before; an argument, or in its ``**kwargs``), else None."""
    try:
        local = frame.f_locals
    except Exception:
        return None
    for key in ("cache", "past_key_values"):
        cache = local.get(key)
        if cache is None and isinstance(local.get("kwargs"), dict):
            cache = local["kwargs"].get(key)
        if cache is not None and not isinstance(cache, bool):
            return cache
    return None


def cache_bytes(cache, _depth=0):
    """(bytes, device) of the key and value tensors a cache holds: a transformers ``Cache`` (its
    ``layers``' keys and values, or 4.4x's ``key_cache`` / ``value_cache``, an encoder-decoder
    cache's two), or the legacy tuples of tensors; (0, None) when none are found."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None) if torch is not None else None
    if tensor is None or cache is None or _depth > 4:
        return 0, None
    total, device = 0, None

    def add(t):
        nonlocal total, device
        if isinstance(t, tensor):
            total += t.numel() * t.element_size()
            if device is None:
                device = str(t.device)

    if isinstance(cache, tensor):
        add(cache)
        return total, device
    if isinstance(cache, (tuple, list)):
        for item in cache[:4096]:
            n, d = cache_bytes(item, _depth + 1)
            total += n
            device = device or d
        return total, device
    layers = getattr(cache, "layers", None)
    if isinstance(layers, (list, tuple)):
        for layer in layers[:4096]:
            add(getattr(layer, "keys", None))
            add(getattr(layer, "values", None))
        return total, device
    keys, values = getattr(cache, "key_cache", None), getattr(cache, "value_cache", None)
    if isinstance(keys, list) and isinstance(values, list):
        for t in keys[:4096] + values[:4096]:
            add(t)
        return total, device
    for part in ("self_attention_cache", "cross_attention_cache"):
        inner = getattr(cache, part, None)
        if inner is not None:
            n, d = cache_bytes(inner, _depth + 1)
            total += n
            device = device or d
    return total, device


def _new_tokens(retval, prompt):
    """New tokens per sequence from ``generate``'s return (ids, or an output with
    ``sequences``), else None."""
    seqs = getattr(retval, "sequences", retval)
    shape = _shape_of(seqs)
    if shape is None or shape[1] is None or prompt is None:
        return None
    return max(0, shape[1] - prompt)


class _Call:
    """One generation call open on a thread, known by its frame (``opener``: its id and code);
    the generate calls nested in it (an assistant's) by theirs."""

    __slots__ = ("opener", "nested", "start", "token_end", "forward_end", "forwards", "fdepth",
                 "batch", "prompt", "fed", "cache")  # fmt: skip

    def __init__(self, start, frame):
        self.opener = (id(frame), frame.f_code)
        self.nested = []  # (id, code) of the generate calls running inside this one
        self.start = start  # ns; None: it began before the monitor did
        self.token_end = None  # the second step's forward began: the first token was chosen
        self.forward_end = None  # the prompt's forward ended
        self.forwards = 0
        self.fdepth = 0  # model forwards open inside it
        self.batch = None
        self.prompt = None
        self.fed = None  # the length of the ids the model was first fed (decoder side)
        self.cache = None


class _Generations:
    """Open generation calls by thread, and the finished ones to send: each a row ``[native
    tid, start ns, first token ns, end ns, batch, prompt tokens, new tokens, KV bytes, KV
    device, forwards]`` (-1 / "" where unknown). A call that raises needs no event: its frame
    never returns, and the thread's next generate call, whose callers do not hold it, replaces
    it. Frame objects are made only on a call's start and end (and to read the ids and the
    cache once), not on the events of every token."""

    def __init__(self, codes):
        self.codes = dict(codes)  # code -> "call" | "forward"
        self.open = {}  # ident -> _Call
        self.done = []
        self.last_split = {}  # ident -> (start ns, first token ns) of its last call ended

    def start(self, code, kind, now, frame=None, args=None):
        """A call of ``code`` began: the monitor's (its frame found from here) or a wrapper's
        (``frame``: the wrapper's own, which stays on the stack for the call; ``args``: its
        arguments, as ``wrappers._ArgsView`` reads them)."""
        ident = threading.get_ident()
        call = self.open.get(ident)
        if kind == "call":
            frame = frame if frame is not None else frame_of(code)
            if call is not None and on_stack(frame.f_back, call.opener[0], call.opener[1], 512):
                call.nested.append((id(frame), frame.f_code))  # an assistant's generate: part of it
                return
            # a new call (one left open raised: nothing is counted for it)
            call = self.open[ident] = _Call(now, frame)
            self._take_shape(call, _input_shape(args if args is not None else frame, code))  # before beams
            return
        if call is None or kind != "forward":
            return
        if call.nested:
            frame = frame if frame is not None else frame_of(code)
            if self._in_nested(call, frame):
                return
        call.fdepth += 1
        if call.fdepth > 1:
            return  # a forward inside the model's forward
        call.forwards += 1
        if call.forwards == 1:  # the prompt's forward: the ids it is fed, the cache it fills
            local = args if args is not None else (frame if frame is not None else frame_of(code))
            self._take_shape(call, _input_shape(local, code))
            call.cache = _cache_of(local)
        elif call.forwards == 2 and call.token_end is None:
            # the second step begins: the first token was chosen (logits processed, sampled,
            # the stopping criteria and a streamer called) just before
            call.token_end = now

    @staticmethod
    def _in_nested(call, frame):
        """Whether ``frame`` runs inside a generate call nested in ``call`` (those that ended
        by an exception are forgotten)."""
        while call.nested:
            fid, code = call.nested[-1]
            if on_stack(frame, fid, code, 512):
                return True
            call.nested.pop()
        return False

    def adopt(self, ident, frame):
        """A generation already running on thread ``ident`` (in ``frame``) when the monitor
        started: followed to its end, which counts nothing."""
        if ident not in self.open:
            self.open[ident] = _Call(None, frame)

    @staticmethod
    def _take_shape(call, shape):
        """The first shape seen is the call's batch and prompt; the first seen inside it (the
        prompt's forward, ``_prefill``, a loop) the length fed, which new tokens count from."""
        if shape is None:
            return
        if call.batch is None:
            call.batch, call.prompt = shape
        elif call.fed is None and shape[1] is not None:
            call.fed = shape[1]

    def finish(self, code, kind, retval, now, frame=None):
        ident = threading.get_ident()
        call = self.open.get(ident)
        if call is None:
            return
        if kind == "call":
            frame = frame if frame is not None else frame_of(code)
            key = (id(frame), getattr(frame, "f_code", None))
            if call.opener == key:
                del self.open[ident]
                if call.start is not None:
                    self._done(ident, call, retval, now)
            elif call.nested and call.nested[-1] == key:
                call.nested.pop()
            return
        if kind != "forward" or (
            call.nested and self._in_nested(call, frame if frame is not None else frame_of(code))
        ):
            return
        if call.fdepth > 0:
            call.fdepth -= 1
            if call.fdepth == 0 and call.forward_end is None:
                call.forward_end = now

    def _done(self, ident, call, retval, now):
        first = call.token_end  # the first token chosen; else the prompt's forward done
        if first is None:
            first = call.forward_end
        new = _new_tokens(retval, call.fed if call.fed is not None else call.prompt)
        if new is None and call.forwards:
            new = call.forwards  # a hand-written loop: a token per forward
        cache, call.cache = call.cache, None
        kv, device = cache_bytes(cache) if cache is not None else (0, None)
        if first is not None:
            self.last_split[ident] = (call.start, first)
        if len(self.done) >= MAX_GENERATIONS_BUFFERED:
            return  # no client reading: the newest are dropped
        self.done.append([
            threading.get_native_id(), call.start, -1 if first is None else first, now,
            -1 if call.batch is None else call.batch, -1 if call.prompt is None else call.prompt,
            -1 if new is None else new, kv if device is not None else -1, device or "",
            call.forwards,
        ])  # fmt: skip

    def split_of(self, ident, start):
        """The first-token time of the generation on thread ``ident`` that began at ``start``
        (ns) and just ended, else None."""
        got = self.last_split.pop(ident, None)
        if got is not None and got[0] == start:
            return got[1]
        return None

    def take(self, offset_ns):
        """The finished calls, times in unix seconds."""
        rows, self.done = self.done, []
        for row in rows:
            for i in (1, 2, 3):
                if row[i] >= 0:
                    row[i] = (row[i] + offset_ns) / 1e9
        return rows
