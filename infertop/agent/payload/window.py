"""The target's own torch (never imported by us), and one profiler window over all its threads:
start, stop, warm-up."""

from __future__ import annotations

import os
import sys
import threading
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.constants import MIN_WINDOW_S, STOP_GRACE_S
from infertop.agent.payload.kineto import _run_capturing_stderr

# -- end --


def _torch():
    """The target's torch module once its import has finished, else None."""
    mod = sys.modules.get("torch")
    if mod is None:
        return None
    spec = getattr(mod, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return None
    if not hasattr(mod, "autograd") or not hasattr(mod, "_C"):
        return None
    return mod


def _cuda_in_use(torch):
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def _experimental_config(torch):
    """(config, all_threads): an _ExperimentalConfig that profiles every thread, if possible."""
    try:
        return torch._C._profiler._ExperimentalConfig(profile_all_threads=True), True
    except Exception:
        return None, False


def _threads_cpu():
    """{native tid: (ns on a CPU, ns waiting on a run queue for one)} of this process's threads,
    from the kernel's ``/proc/self/task/TID/schedstat`` ({} where there is none): what the op
    thread waited for a CPU during a window, whose op times hold those stops."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/self/task/%s/schedstat" % tid, "rb") as f:
                run, wait = f.read().split()[:2]
            out[int(tid)] = (int(run), int(wait))
        except (OSError, ValueError):
            continue
    return out


def _new_profile(torch, record_shapes, experimental_config, use_cuda, profile_memory=False):
    """A low-level ``torch.autograd.profiler.profile`` (not ``torch.profiler.profile``, whose
    prepare step imports ``torch._inductor``: ~1 s and much memory in a target that never did).
    ``profile_memory``: the allocator's allocations and frees too (``memory`` events)."""
    kwargs = {"use_kineto": True, "record_shapes": bool(record_shapes)}
    if profile_memory:
        kwargs["profile_memory"] = True
    if experimental_config is not None:
        kwargs["experimental_config"] = experimental_config
    try:
        return torch.autograd.profiler.profile(use_device="cuda" if use_cuda else None, **kwargs)
    except TypeError:
        return torch.autograd.profiler.profile(use_cuda=bool(use_cuda), **kwargs)


class _Window:
    """One profiler window on the agent thread: start(), later stop() -> event tuples."""

    def __init__(self, torch, config, kineto_log, experimental_config, first_init):
        self.torch = torch
        self.record_shapes = bool(config["record_shapes"])
        # no profile_memory here: the allocator reports to the allocating thread's profiler
        # only, never to one over all threads started elsewhere (_MemoryCall does that)
        self.profile_memory = False
        self.use_cuda = _cuda_in_use(torch)
        self.prof = _new_profile(torch, self.record_shapes, experimental_config, self.use_cuda)
        self.kineto_log = kineto_log
        self.first_init = first_init
        self.log_level = None
        self.t_start = 0.0
        self.started_mono = 0.0
        self.running = False
        self.grace_s = 0.0  # of the stop, spent waiting for ops to drain (costs the target nothing)
        self.cpu_start = self.cpu_end = {}  # _threads_cpu() as the window starts and as it stops

    def start(self):
        prof = self.prof
        if self.first_init:
            _run_capturing_stderr(prof._prepare_trace)
        else:
            prof._prepare_trace()
        self.log_level = self.kineto_log.quiet()
        try:
            prof._start_trace()
        except BaseException:
            self.kineto_log.restore(self.log_level)
            raise
        self.t_start = time.time()
        self.started_mono = time.monotonic()
        self.running = True
        self.cpu_start = _threads_cpu()

    def stop(self):
        """End the window; returns the raw ``_KinetoEvent`` list (or [] on failure)."""
        if not self.running:
            return []
        age = time.monotonic() - self.started_mono
        if age < MIN_WINDOW_S:
            time.sleep(MIN_WINDOW_S - age)  # see MIN_WINDOW_S
        self.running = False
        self.cpu_end = _threads_cpu()
        c10_level = self.kineto_log.quiet_c10()
        try:
            self.grace_s = _remove_op_callbacks(self.torch, self.prof)
            self.prof.__exit__(None, None, None)
            results = self.prof.kineto_results
            return results.events() if results is not None else []
        finally:
            self.kineto_log.restore_c10(c10_level)
            self.kineto_log.restore(self.log_level)
            self.prof = None


def _dynamo_compiled():
    """torch.compile has compiled code in this process (its frames' counters; dynamo never
    imported: nothing was): global module hooks would make its graphs compile anew."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is None:
        return False
    try:
        frames = dynamo.counters.get("frames") or {}
        return bool(frames.get("ok") or frames.get("total"))
    except Exception:
        return True


def _rows_of(torch, args):
    """The first dimension of a call's first tensor argument (its batch, as a model is called),
    or None: no tensor among its positional arguments (``model(**inputs)``)."""
    try:
        for a in args:
            if isinstance(a, torch.Tensor):
                return int(a.shape[0]) if a.dim() >= 1 else None
    except Exception:
        pass
    return None


def _module_calls(code):
    """How many frames of ``code`` (``Module._call_impl``'s) the calling thread's stack holds."""
    n = 0
    f = sys._getframe(2)
    while f is not None:
        if f.f_code is code:
            n += 1
        f = f.f_back
    return n


class _MemoryCall:
    """One model call profiled with ``profile_memory`` on the thread that makes it: the
    allocator reports to the profiler of the allocating thread only, which a window over all
    threads from the agent's thread is not (torch 2.13: no memory events at all). ``start``
    registers global module hooks; the next call on any thread of a model the agent times
    (``models``: their forwards' code objects, ``code_of`` reads a function's; none known: of
    any outermost ``nn.Module``) claims them, runs under a profiler of its own thread, which its
    end stops; the hooks go as it ends (or when ``close`` gives up). The agent's thread reduces
    the events (``stop``), as a window's."""

    def __init__(self, torch, config, kineto_log, models=(), code_of=None):
        self.torch = torch
        self.record_shapes = bool(config["record_shapes"])
        self.profile_memory = True
        self.use_cuda = _cuda_in_use(torch)
        self.kineto_log = kineto_log
        self.lock = threading.Lock()
        self.state = "armed"  # -> running (claimed) -> done | failed; closed: given up
        self.owner = None  # the claiming thread's ident
        self.module = None
        self.rows = None  # the call's batch: its first tensor argument's first dimension
        self.prof = None
        self.raw = None
        self.log_level = None
        self.hooks = []
        self.code = torch.nn.Module._call_impl.__code__
        self.models = frozenset(models) if code_of is not None else frozenset()
        self.code_of = code_of
        self.depth = 1  # of the claimed call: how many module calls its stack holds
        # True while torch.compile traces a call (the hooks then return at once: traced, the
        # rest of them would be part of its graph, and dynamo raised on them in the target)
        self.compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
        self.t_start = self.t_end = 0.0
        self.started_mono = 0.0  # when armed; the call's own start once claimed
        self.stopped_ns = 0
        self.target_s = 0.0  # the profiler's start and stop, on the target's thread
        self.grace_s = 0.0
        self.cpu_start = self.cpu_end = {}

    def start(self):
        """Arm the hooks. Raises where this torch's module hooks cannot be called on a call that
        raises (``always_call``, torch >= 2.0): a profiler left running on a target's thread
        would record every op it runs from then on."""
        hooks = self.torch.nn.modules.module
        post = hooks.register_module_forward_hook(self._post, always_call=True)
        self.hooks = [hooks.register_module_forward_pre_hook(self._pre), post]
        self.started_mono = time.monotonic()
        self.t_start = time.time()

    def _remove_hooks(self, keep_post=False):
        """Remove the hooks; ``keep_post``: all but the one that stops a claimed call's profiler
        (that call's end removes it)."""
        hooks, self.hooks = self.hooks, (self.hooks[1:] if keep_post else [])
        for h in hooks[:1] if keep_post else hooks:
            try:
                h.remove()
            except Exception:
                pass

    def _pre(self, module, args):
        if self.compiling is not None and self.compiling():
            return None
        if self.state != "armed":
            return None
        depth = _module_calls(self.code)
        if self.models:
            try:
                if self.code_of(getattr(type(module), "forward", None)) not in self.models:
                    return None
            except Exception:
                return None
        elif depth != 1:
            return None
        with self.lock:
            if self.state != "armed":
                return None
            self.state = "running"
        t0 = time.perf_counter()
        self.owner = threading.get_ident()
        self.module = module
        self.depth = depth
        self.rows = _rows_of(self.torch, args)
        try:
            prof = _new_profile(self.torch, self.record_shapes, None, self.use_cuda, True)
            prof._prepare_trace()
            self.log_level = self.kineto_log.quiet()
            prof._start_trace()
            self.prof = prof
        except Exception:
            self.kineto_log.restore(self.log_level)
            self.state = "failed"
            self._remove_hooks()
        self.t_start = time.time()
        self.started_mono = time.monotonic()
        self.target_s += time.perf_counter() - t0
        return None

    def _post(self, module, args, output):
        if self.compiling is not None and self.compiling():
            return None
        if self.state == "closed" and self.prof is None and self.owner == threading.get_ident():
            self._remove_hooks()  # given up on while its profiler was being started, or failed
            return None
        if self.state not in ("running", "closed") or self.prof is None:
            return None
        if module is not self.module or threading.get_ident() != self.owner:
            return None
        if _module_calls(self.code) != self.depth:
            return None
        t0 = time.perf_counter()
        self.t_end = time.time()
        prof, self.prof = self.prof, None
        self._remove_hooks()
        raw = None
        try:
            prof.__exit__(None, None, None)
            results = prof.kineto_results
            raw = results.events() if results is not None else []
        except Exception:
            raw = None
        finally:
            self.kineto_log.restore(self.log_level)
        self.stopped_ns = time.time_ns()
        with self.lock:
            if self.state == "running" and raw is not None:
                self.raw = raw
                self.state = "done"
            elif self.state == "running":
                self.state = "failed"
        self.target_s += time.perf_counter() - t0
        return None

    def pending(self):
        """The claimed call has not ended yet."""
        return self.state == "running"

    def close(self):
        """Give up on a call not claimed yet (or still running): its hooks go now, a running
        call's own end stops its profiler and drops what it recorded."""
        with self.lock:
            running = self.state == "running"
            if self.state in ("armed", "running"):
                self.state = "closed"
        self._remove_hooks(keep_post=running)

    def stop(self):
        """The claimed call's raw ``_KinetoEvent`` list ([] when none was profiled)."""
        self.close()
        raw, self.raw = self.raw, None
        return raw if raw is not None else []


def _remove_op_callbacks(torch, prof):
    """Stop recording CPU ops, then give ops in flight on other threads a moment to leave the
    profiler's callbacks before the window is finalised (see STOP_GRACE_S)."""
    toggle = getattr(prof, "toggle_collection_dynamic", None)
    if toggle is None:
        return 0.0
    try:
        toggle(False, [torch._C._profiler.ProfilerActivity.CPU])
    except Exception:
        return 0.0
    time.sleep(STOP_GRACE_S)  # the target runs freely meanwhile: not a cost of the window
    return STOP_GRACE_S


def _warm_up(torch, kineto_log, experimental_config):
    """One empty profile on this thread (the one that imported torch, at injection or arm()):
    lets a later background-thread profiler see every thread without libkineto complaining."""
    prof = _new_profile(torch, False, None, False)

    def run():
        prof._prepare_trace()
        old = kineto_log.quiet()
        try:
            prof._start_trace()
            prof.__exit__(None, None, None)
        finally:
            kineto_log.restore(old)

    if kineto_log.initialised():
        run()
    else:
        _run_capturing_stderr(run)
