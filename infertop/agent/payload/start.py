"""Starting the agent in the target: the last part of the payload (``_infertop_agent_start``)."""

from __future__ import annotations

import os
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.agent import _Agent, _registered_agent

# -- end --


def _free_region(region):
    """Free the bytes an injector wrote the bootstrap into: ``(address, size, how)``.

    Safe as soon as the bootstrap runs: CPython has parsed (copied) the string by then.
    """
    if not region:
        return
    try:
        import ctypes

        addr, size, how = region
        if how == "munmap":
            libc = ctypes.CDLL(None)
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(size))
        elif how == "pymem":
            ctypes.pythonapi.PyMem_RawFree.argtypes = [ctypes.c_void_p]
            ctypes.pythonapi.PyMem_RawFree.restype = None
            ctypes.pythonapi.PyMem_RawFree(ctypes.c_void_p(addr))
    except Exception:
        pass


def _infertop_agent_start(mode="injected", deadline=None, boot_file=None, free_region=None, idle_exit_s=20.0):
    """Start the agent in this process (once); returns it, or None when nothing was started.

    Injected mode never raises (nothing may leak into the target); armed mode raises on errors.
    """
    if boot_file:
        try:
            os.unlink(boot_file)
        except OSError:
            pass
    _free_region(free_region)
    agent = None
    try:
        if deadline is not None and time.time() > deadline:
            return None  # the injector gave up on us: stay out
        existing = _registered_agent()
        if existing is not None:
            return existing
        agent = _Agent(mode, idle_exit_s=idle_exit_s)
        agent.open()
        try:
            agent.prepare_torch(on_this_thread=True)
        except Exception:
            pass
        agent.start_thread()
        return agent
    except BaseException:
        if agent is not None and agent.thread is None:
            agent._shutdown()
        if mode != "injected":
            raise
        return None
