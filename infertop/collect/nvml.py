"""NVML probe. The full GPU collector comes with the GPU panel; today this says whether NVML
is there and, when it is not, why — one chokepoint so the UI never sees an NVML exception."""

from __future__ import annotations

import time

from infertop.model.events import CollectorStatus


def probe_nvml() -> CollectorStatus:
    """Try to initialise NVML once; report 'running' with the device count, or why not."""
    try:
        import pynvml
    except Exception as exc:  # missing bindings, or bindings that fail to import
        return CollectorStatus(time.time(), "nvml", "unavailable", f"no NVML bindings ({exc})")
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return CollectorStatus(time.time(), "nvml", "unavailable", f"no GPU: {_nvml_reason(exc)}")
    try:
        count = pynvml.nvmlDeviceGetCount()
    except Exception as exc:
        return CollectorStatus(time.time(), "nvml", "unavailable", f"NVML: {_nvml_reason(exc)}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    if count == 0:
        return CollectorStatus(time.time(), "nvml", "unavailable", "no GPU: NVML sees 0 devices")
    return CollectorStatus(time.time(), "nvml", "running", f"{count} GPU(s)")


def _nvml_reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if "Library Not Found" in text or "LibraryNotFound" in type(exc).__name__:
        return "NVML library not found (no NVIDIA driver on this host)"
    if "Driver Not Loaded" in text:
        return "NVIDIA driver not loaded"
    if "No Permission" in text:
        return "no permission to query NVML"
    return text
