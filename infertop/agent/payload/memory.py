"""The agent's CUDA caching-allocator statistics, and giving a window's memory back."""

from __future__ import annotations

import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.window import _cuda_in_use, _torch

# -- end --


class _MemoryMixin:
    """The ``allocator`` messages, one per device each ALLOCATOR_EVERY_S while started (sent
    through ``_ServingMixin._send``)."""

    def _init_memory(self):
        self.next_allocator = 0.0

    def _send_allocator(self):
        torch = _torch()
        if torch is None or not _cuda_in_use(torch):
            return
        try:
            count = torch.cuda.device_count()
            current = torch.cuda.current_device()
        except Exception:
            return
        for device in range(count):
            try:
                stats = torch.cuda.memory_stats(device)
            except Exception:
                continue
            if not stats or (device != current and not stats.get("reserved_bytes.all.current")):
                continue
            self._send(
                {
                    "type": "allocator",
                    "t": time.time(),
                    "device": device,
                    "allocated": int(stats.get("allocated_bytes.all.current", 0)),
                    "reserved": int(stats.get("reserved_bytes.all.current", 0)),
                    "peak_allocated": int(stats.get("allocated_bytes.all.peak", 0)),
                    "alloc_retries": int(stats.get("num_alloc_retries", 0)),
                    "ooms": int(stats.get("num_ooms", 0)),
                }
            )


_malloc_trim: list = []  # [libc's malloc_trim or None], once looked up


def _trim_heap():
    """Give the memory a window's results took back to the system (glibc ``malloc_trim``):
    otherwise the target keeps the high-water mark of the biggest window in its RSS."""
    try:
        if not _malloc_trim:
            import ctypes

            libc = ctypes.CDLL(None)
            fn = getattr(libc, "malloc_trim", None)
            if fn is not None:
                fn.argtypes = [ctypes.c_size_t]
                fn.restype = ctypes.c_int
            _malloc_trim.append(fn)
        fn = _malloc_trim[0]
        if fn is not None:
            fn(0)
    except Exception:
        _malloc_trim[:] = [None]
