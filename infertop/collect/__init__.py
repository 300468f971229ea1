"""Collectors: py-spy windows, NVML, the agent's socket client and its injection in the background,
process trees (layer: collectors, above agent and model). Import the modules by name."""

__all__ = [
    "agent_attach",
    "agent_client",
    "base",
    "child_agents",
    "many_targets",
    "nvml",
    "pyspy",
    "target",
    "thread_cpu",
    "tree",
]
