"""Collectors: sources of events (py-spy, the agent, NVML, recordings)."""
