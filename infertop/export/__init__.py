"""`infertop export`: Chrome/Perfetto, speedscope, Kineto and pprof exports of recordings and traces
(layer: views). Import the modules by name."""

__all__ = [
    "chrome",
    "chrome_counters",
    "chrome_trace",
    "chunk_findings",
    "formats",
    "gpu_groups",
    "jsonout",
    "kineto",
    "lanes",
    "oplayout",
    "pprof",
    "prelude",
    "run",
    "samples",
    "speedscope",
    "speedscope_trace",
]
