"""The Chrome/Perfetto export (Trace Event Format; docs/export.md).

- ``recording``: a recording as one trace, streamed record by record, with ``samples`` (the
  per-thread timeline from sample windows), ``pauses`` (GC slices and loop-lag counters),
  ``counters`` (threads by stage, GPU busy, allocator and NVML counters, findings),
  ``chunk_findings`` (findings minute by minute) and ``gpu_groups`` (each GPU's track group);
- ``trace``: a torch.profiler trace re-emitted so that every viewer draws all of it.

The export's entry points are ``recording.export_chrome_recording`` and
``trace.export_chrome_trace``; import the modules by name.
"""

__all__ = ["chunk_findings", "counters", "gpu_groups", "pauses", "recording", "samples", "trace"]
