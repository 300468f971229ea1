"""`infertop export`: Chrome/Perfetto, speedscope and Kineto exports of recordings and traces
(layer: views). Import the modules by name."""

__all__ = [
    "chrome",
    "chrome_counters",
    "chrome_trace",
    "chunk_findings",
    "gpu_groups",
    "jsonout",
    "kineto",
    "lanes",
    "oplayout",
    "prelude",
    "run",
    "samples",
    "speedscope",
    "speedscope_trace",
]
