"""The formats ``infertop export`` writes (docs/export.md): one table, in ``--help`` order.

Each format is a row: its name (``--format NAME``), the file names it is written to, its part
of ``export --help``, and its writer. Every writer has the one signature ``Writer``: the input
(a recording, or with ``trace`` a torch.profiler trace), the output path and the settings, in;
an ``ExportResult`` out; an input its format cannot hold is refused by the writer, not here.
``export --format``'s choices and help, and ``export.run``'s dispatch, are read from this
table; nothing else names a format.

The writers are named, not imported: a format's module loads when it is asked for, so start-up
loads none of them (pprof's protobuf, the trace exporters' numpy columns).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, cast

if TYPE_CHECKING:
    from infertop.config import Config
    from infertop.export.prelude import ExportResult

#: ``writer(path, out, config, trace)``: ``path`` a recording, or with ``trace`` a
#: torch.profiler trace; ``out`` the file to write
Writer = Callable[[str, str, "Config", bool], "ExportResult"]


class ExportFormat(NamedTuple):
    """One format (a NamedTuple, not a dataclass: the table is read at start-up)."""

    name: str
    #: the names its files take (the first one usual), for the output's hints
    suffixes: tuple[str, ...]
    #: its part of ``export --help``
    description: str
    #: ``MODULE:FUNCTION``, a ``Writer``, imported when the format is asked for
    writer: str

    def load(self) -> Writer:
        module, _, name = self.writer.partition(":")
        return cast("Writer", getattr(importlib.import_module(module), name))


FORMATS: dict[str, ExportFormat] = {
    f.name: f
    for f in (
        ExportFormat(
            "chrome", (".json", ".json.gz"),
            "Trace Event Format JSON for Perfetto / chrome://tracing (gzip when OUT ends in .gz)",
            "infertop.export.chrome:export_chrome",
        ),
        ExportFormat(
            "speedscope", (".json",),
            "sampled CPU profiles per thread and per stage",
            "infertop.export.speedscope:export_speedscope",
        ),
        ExportFormat(
            "kineto", (".json", ".json.gz"),
            "the recording's torch.profiler windows as a trace for TensorBoard / Holistic Trace "
            "Analysis",
            "infertop.export.kineto:export_kineto",
        ),
        ExportFormat(
            "pprof", (".pb.gz",),
            "the CPU samples as a gzipped pprof profile labelled by stage, thread and process "
            "(go tool pprof, Pyroscope, Parca)",
            "infertop.export.pprof:export_pprof",
        ),
        ExportFormat(
            "pprof-ops", (".pb.gz",),
            "the torch-profiler windows' op time as pprof (op path -> kernel)",
            "infertop.export.pprof:export_pprof_ops",
        ),
    )
}  # fmt: skip


def formats_help() -> str:
    """``export --help``'s description: each format's line, in the table's order."""
    lines = "; ".join(f"{f.name}: {f.description}" for f in FORMATS.values())
    return f"{lines}. See docs/export.md."


def output_names() -> str:
    """The file names the formats write, for a hint: ``OUT.json, OUT.json.gz or OUT.pb.gz``."""
    names = [f"OUT{s}" for s in dict.fromkeys(s for f in FORMATS.values() for s in f.suffixes)]
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
