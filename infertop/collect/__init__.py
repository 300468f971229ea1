"""Collectors: py-spy windows, NVML, the agent's socket client and its injection in the background,
process trees (layer: collectors, above agent and model). Import the modules by name."""

__all__ = [
    "agent",
    "base",
    "many_targets",
    "matched",
    "nvml",
    "pyspy",
    "target",
    "thread_cpu",
    "tree",
]
