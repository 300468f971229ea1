"""torch.profiler (Kineto) traces: finding and reading the files (``files``), the columnar
table every analysis of a trace works on (``table``) and its GPU summary (``gpu``).

This package sits just above ``model``: collectors, analysis, import, report, export and
compare read traces through it, and it imports nothing above it. ``files`` imports nothing
heavy (``report`` starts reading a trace before numpy is loaded); import the others by name.
"""

__all__ = ["files", "gpu", "table"]
