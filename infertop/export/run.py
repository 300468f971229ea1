"""``infertop export``: picks the exporter for the input (recording or torch.profiler trace)
and the format."""

from __future__ import annotations

import os

from infertop.config import Config
from infertop.errors import UsageError
from infertop.export.formats import FORMATS
from infertop.export.prelude import ExportResult
from infertop.trace.files import is_trace_path


def export(path: str, fmt: str, out: str, config: Config | None = None) -> ExportResult:
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    if os.path.exists(out) and os.path.exists(path) and os.path.samefile(out, path):
        raise UsageError("the output would overwrite the input", "give another -o OUT")
    if os.path.isdir(out):
        raise UsageError(f"{out} is a directory", "give a file name: -o OUT.json, OUT.json.gz or OUT.pb.gz")
    if os.path.exists(out) and not os.path.isfile(out):  # the export replaces OUT when done
        raise UsageError(
            f"{out} is not a regular file (a device, pipe or socket would be replaced)",
            "give a file name: -o OUT.json, OUT.json.gz or OUT.pb.gz",
        )
    trace = is_trace_path(path)
    if trace and os.path.isdir(path):
        raise UsageError(
            f"{path} is a directory: export one trace at a time",
            "infertop export RANK_TRACE.json --format chrome -o OUT.json.gz",
        )
    # each exporter is imported when its format is asked for: start-up loads one of them
    # (pprof's protobuf, the trace exporters' numpy columns), not all
    if fmt == "chrome":
        if trace:
            from infertop.export.chrome.trace import export_chrome_trace

            return export_chrome_trace(path, out, (config or Config()).findings)
        from infertop.export.chrome.recording import export_chrome_recording

        return export_chrome_recording(path, out, config)
    if fmt == "speedscope":
        from infertop.export.speedscope import export_speedscope

        return export_speedscope(path, out, config, trace=trace)
    if fmt == "pprof":
        from infertop.export.pprof import export_pprof

        return export_pprof(path, out, config, trace=trace)
    if fmt == "pprof-ops":
        from infertop.export.pprof import export_pprof_ops

        return export_pprof_ops(path, out, trace=trace)
    if trace:
        raise UsageError(
            f"{path} already is a torch.profiler trace",
            "open it as it is in TensorBoard or Holistic Trace Analysis",
        )
    from infertop.export.kineto import export_kineto

    return export_kineto(path, out)
