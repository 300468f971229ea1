"""Bottleneck findings: the rules and the evidence each source gives them.

- ``rules``: the registry (``RULES``), ``FindingInput`` and ``evaluate``/``ranked``; every rule
  is in docs/findings.md;
- ``cpu``: the host's CPU as the cause (``cpu-starved``), registered after the others;
- ``memory``: the memory rules (device memory, the allocator's slack, the KV cache's headroom),
  registered after the others;
- ``session``: a snapshot's evidence (``snapshot_input``);
- ``trace``: a torch.profiler trace's (``trace_input``);
- ``live``: the live and replayed snapshot's findings, per process and for the whole session
  (``with_findings``).

This package exports the rules' names; ``session``, ``trace`` and ``live`` load the snapshot and
the trace model, so they are imported by name where needed.
"""

from infertop.analysis.findings import cpu as _cpu  # noqa: F401  (its rule registers)
from infertop.analysis.findings import memory as _memory  # noqa: F401  (its rules register)
from infertop.analysis.findings.rules import (
    RULES,
    FindingInput,
    MemoryState,
    evaluate,
    ranked,
    severity_rank,
)
from infertop.model.findings import Finding

__all__ = ["RULES", "Finding", "FindingInput", "MemoryState", "evaluate", "ranked", "severity_rank"]
