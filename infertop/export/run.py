"""``infertop export``: checks the input and the output, then hands them to the format's writer
(``export/formats.py``, the table of formats)."""

from __future__ import annotations

import os

from infertop.config import Config
from infertop.errors import UsageError
from infertop.export.formats import FORMATS, output_names
from infertop.export.prelude import ExportResult
from infertop.trace.files import is_trace_path


def export(path: str, fmt: str, out: str, config: Config | None = None) -> ExportResult:
    form = FORMATS.get(fmt)
    if form is None:
        raise UsageError(f"unknown export format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    if os.path.exists(out) and os.path.exists(path) and os.path.samefile(out, path):
        raise UsageError("the output would overwrite the input", "give another -o OUT")
    if os.path.isdir(out):
        raise UsageError(f"{out} is a directory", f"give a file name: -o {output_names()}")
    if os.path.exists(out) and not os.path.isfile(out):  # the export replaces OUT when done
        raise UsageError(
            f"{out} is not a regular file (a device, pipe or socket would be replaced)",
            f"give a file name: -o {output_names()}",
        )
    trace = is_trace_path(path)
    if trace and os.path.isdir(path):
        raise UsageError(
            f"{path} is a directory: export one trace at a time",
            "infertop export RANK_TRACE.json --format chrome -o OUT.json.gz",
        )
    return form.load()(path, out, config or Config(), trace)
