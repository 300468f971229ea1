"""Where the timer of Python 3.10 and 3.11 (``wrappers.py``) puts its wrappers: the slots -- a
dictionary entry that holds a timed function (a class's method, a module's function, the
copies other modules imported by name) -- found by reading dictionaries only, and the model
instances whose ``forward`` is an instance attribute (a hook library's wrapper). Nothing here
replaces anything; ``wrappers.py`` does, and puts back.
"""

from __future__ import annotations

import sys

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.safe_reads import subclasses_of, tracked_of_types

# -- end --

#: the most slots (a dictionary entry holding a timed function) the wrapper timer replaces
MAX_WRAPPED_SLOTS = 4000
#: where a function's code names a file no loaded module has (a moved environment whose byte
#: code was compiled elsewhere), the modules and classes walked for it at most
MAX_FALLBACK_MODULES = 5000


def _inner_codes(fn):
    """The code objects of ``fn`` and of what its decorators wrap (``__wrapped__``)."""
    out = []
    for _ in range(10):
        code = getattr(fn, "__code__", None)
        if code is not None:
            out.append(code)
        d = getattr(fn, "__dict__", None)
        inner = d.get("__wrapped__") if type(d) is dict else None
        if inner is None:
            break
        fn = inner
    return out


def _function_of(value, func_type):
    """(the function a dictionary entry calls, its kind) or None: a function, or the one a
    static or class method holds."""
    t = type(value)
    if t is func_type:
        return value, "function"
    if t is staticmethod or t is classmethod:
        fn = value.__func__
        if type(fn) is func_type:
            return fn, "static" if t is staticmethod else "class"
    return None


def _class_space(cls):
    """A class's own dictionary, read without its metaclass's ``__dict__`` (None if odd)."""
    try:
        return type.__dict__["__dict__"].__get__(cls)
    except Exception:
        return None


class _Slot:
    """One dictionary entry replaced: ``holder`` (a module or a class) ``name`` held
    ``original`` and holds ``wrapper`` while the timer is on."""

    __slots__ = ("holder", "name", "original", "wrapper")

    def __init__(self, holder, name, original):
        self.holder = holder
        self.name = name
        self.original = original
        self.wrapper = None

    def space(self):
        h = self.holder
        if issubclass(type(h), type):
            return _class_space(h) or {}
        return h.__dict__

    def put(self, value):
        h = self.holder
        if issubclass(type(h), type):
            type.__setattr__(h, self.name, value)  # (not a metaclass's __setattr__)
        else:
            h.__dict__[self.name] = value


def find_slots(codes, module_type=None, func_type=None):
    """[(holder, name, value, code)] of the dictionary entries that call one of ``codes``: in
    the loaded modules whose file is the code's (their functions and the classes they define,
    nested ones too), where a function was imported by name into another module's dictionary,
    and, for codes still not found, on ``sys`` (Triton's stub puts the model's class there) and
    in every loaded module and the classes it defines. Only dictionaries are read: no
    attribute lookup runs the target's code."""
    import types

    module_type = module_type or types.ModuleType
    func_type = func_type or types.FunctionType
    wanted = set(codes)
    files = {c.co_filename for c in wanted}
    modules = [m for m in list(sys.modules.values()) if type(m) is module_type or isinstance(m, module_type)]
    found, seen = [], set()

    def look(holder, space, own):
        for name, value in list(space.items()):
            got = _function_of(value, func_type)
            if got is not None:
                for code in _inner_codes(got[0]):
                    if code in wanted and (id(holder), name) not in seen:
                        seen.add((id(holder), name))
                        found.append((holder, name, value, code))
                        break
            elif own is not None and type(value) is not module_type and issubclass(type(value), type):
                inner = _class_space(value)
                if inner is not None and inner.get("__module__") == own and id(value) not in classes_seen:
                    classes_seen.add(id(value))
                    look(value, inner, own)

    classes_seen = set()
    walked = set()
    for mod in modules:
        space = mod.__dict__
        if space.get("__file__") in files:
            walked.add(id(mod))
            look(mod, space, space.get("__name__"))
    missing = wanted - {f[3] for f in found}
    if missing:  # Triton's stub puts the model's class on sys
        for value in list(sys.__dict__.values()):
            inner = _class_space(value) if issubclass(type(value), type) else None
            if inner is not None and id(value) not in classes_seen:
                classes_seen.add(id(value))
                look(value, inner, None)
        missing = wanted - {f[3] for f in found}
    known = {m.__dict__.get("__file__") for m in modules}
    if any(c.co_filename not in known for c in missing):
        # byte code compiled under another path (a moved environment): every module, by the
        # classes it defines; a code whose file is loaded but was not found is a function
        # defined inside another one, which no dictionary holds
        for mod in modules[:MAX_FALLBACK_MODULES]:
            if id(mod) not in walked:
                look(mod, mod.__dict__, mod.__dict__.get("__name__"))
    # a module function imported by name elsewhere (``from json import dumps``): that copy too
    plain = {id(f[2]): f[3] for f in found if type(f[2]) is func_type and not isinstance(f[0], type)}
    if plain:
        for mod in modules:
            for name, value in list(mod.__dict__.items()):
                code = plain.get(id(value))
                if code is not None and (id(mod), name) not in seen:
                    seen.add((id(mod), name))
                    found.append((mod, name, value, code))
    return found[:MAX_WRAPPED_SLOTS]


def model_instances(targets):
    """(the classes of the torch modules that run under ``torch.compile``, [(module, its own
    ``forward`` attribute, the timed code under it)]), from one walk of the collector's list,
    made only where ``torch._dynamo`` or ``accelerate`` was imported (else nothing was compiled
    nor hooked: ``(set(), [])``).

    Compiled: held by an ``OptimizedModule`` or compiled in place by ``Module.compile``, with
    their sub-modules' classes and their bases: none of their methods is wrapped. Dynamo guards
    on the function a compiled region calls, so a wrapper put in would make it compile again
    (seconds of the target's time, warnings on its stderr about the wrapper's clock), and again
    at detach.

    Hooked: a module whose instance holds its own ``forward`` (accelerate's hooks,
    ``device_map="auto"``: a partial of the hook around the bound original, taken when the
    model was loaded) calls that, never its class's: the instance's entry is wrapped."""
    if "torch._dynamo" not in sys.modules and "accelerate" not in sys.modules:
        return set(), []
    base = getattr(sys.modules.get("torch.nn.modules.module"), "Module", None)
    if not isinstance(base, type):
        return set(), []
    roots, hooked = [], []
    for obj in tracked_of_types(subclasses_of(base)):
        t = type(obj)
        space = obj.__dict__
        if t.__name__ == "OptimizedModule":
            inner = (space.get("_modules") or {}).get("_orig_mod")
            if inner is not None:
                roots.append(inner)
        elif space.get("_compiled_call_impl") is not None:
            roots.append(obj)
        own = space.get("forward")
        if own is not None and len(hooked) < MAX_WRAPPED_SLOTS:
            code = _hooked_code(own, targets)
            if code is not None:
                hooked.append((obj, own, code))
    out, todo, seen = set(), roots, set()
    while todo and len(seen) < 100000:
        m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        out.update(c for c in type(m).__mro__ if c is not base and c is not object)
        todo.extend(c for c in (m.__dict__.get("_modules") or {}).values() if c is not None)
    return out, hooked


def _hooked_code(value, targets):
    """The timed code an instance's ``forward`` calls through its ``__wrapped__`` chain (a
    bound method's function among them), else None. Only dictionaries are read."""
    for _ in range(10):
        fn = value.__func__ if type(value).__name__ == "method" else value
        code = getattr(fn, "__code__", None) if type(fn).__name__ == "function" else None
        if code is not None and code in targets:
            return code
        d = getattr(fn, "__dict__", None)
        value = d.get("__wrapped__") if type(d) is dict else None
        if value is None:
            return None
    return None
