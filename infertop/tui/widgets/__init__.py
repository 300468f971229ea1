"""The UI's panels, one module each: stages, GPU, flame, ops, status line, timeline. Import the
modules by name."""

__all__ = [
    "flame",
    "gpu",
    "ops",
    "stages",
    "status",
    "timeline",
]
