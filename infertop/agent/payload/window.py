"""The target's own torch (never imported by us), and one profiler window over all its threads:
start, stop, warm-up."""

from __future__ import annotations

import os
import sys
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


def _new_profile(torch, record_shapes, experimental_config, use_cuda):
    """A low-level ``torch.autograd.profiler.profile`` (not ``torch.profiler.profile``, whose
    prepare step imports ``torch._inductor``: ~1 s and much memory in a target that never did)."""
    kwargs = {"use_kineto": True, "record_shapes": bool(record_shapes)}
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
