"""`infertop export`: Chrome/Perfetto, speedscope, Kineto and pprof exports of recordings and traces
(layer: views). Import the modules by name."""

__all__ = [
    "chrome",
    "formats",
    "jsonout",
    "kineto",
    "lanes",
    "oplayout",
    "pprof",
    "prelude",
    "run",
    "speedscope",
    "speedscope_trace",
]
