"""Exports of recordings and torch.profiler traces: Chrome trace, speedscope, Kineto (docs/export.md)."""
