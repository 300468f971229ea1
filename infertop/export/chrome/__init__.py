"""The Chrome/Perfetto export (Trace Event Format; docs/export.md).

- ``recording``: a recording as one trace, streamed record by record, with ``samples`` (the
  per-thread timeline from sample windows), ``pauses`` (GC slices and loop-lag counters),
  ``counters`` (threads by stage, GPU busy, allocator and NVML counters, findings),
  ``chunk_findings`` (findings minute by minute) and ``gpu_groups`` (each GPU's track group);
- ``trace``: a torch.profiler trace re-emitted so that every viewer draws all of it.

Its writer (``export/formats.py``) is ``export_chrome``, which loads the one of the two that
its input needs; import the modules by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infertop.config import Config
    from infertop.export.prelude import ExportResult


def export_chrome(path: str, out: str, config: Config, trace: bool) -> ExportResult:
    # each imported here: an export loads its own input's exporter only (a recording's need
    # not load the trace model's numpy columns)
    if trace:
        from infertop.export.chrome.trace import export_chrome_trace

        return export_chrome_trace(path, out, config.findings)
    from infertop.export.chrome.recording import export_chrome_recording

    return export_chrome_recording(path, out, config)


__all__ = [
    "chunk_findings", "counters", "export_chrome", "gpu_groups", "pauses", "recording",
    "samples", "trace",
]  # fmt: skip
