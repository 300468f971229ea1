"""The session and everything computed from it: stages, wall view, flame, shares, ops, GPU series,
findings, snapshots, processes (layer: analysis, above collectors and traces). Import the
modules by name."""

__all__ = [
    "findings",
    "flame",
    "gpu_series",
    "latency_sketch",
    "ops",
    "processes",
    "session",
    "shares",
    "snapshot",
    "stages",
    "stragglers",
    "trace_ops",
    "wall",
    "windows",
]
