"""`infertop export`'s one table of formats: each a writer of one signature, and the command's
choices, help and dispatch read from the table."""

from __future__ import annotations

import inspect

import pytest

from infertop.commands.export import COMMAND
from infertop.config import Config
from infertop.errors import UsageError
from infertop.export import formats
from infertop.export.formats import FORMATS, ExportFormat, output_names
from infertop.export.prelude import ExportResult
from infertop.export.run import export
from tests.support import data

RECORDING = str(data.DATA / "recordings" / "textgen_service.infertop")
SIGNATURE = ["path", "out", "config", "trace"]


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_format_has_a_writer_of_the_one_signature(name: str) -> None:
    form = FORMATS[name]
    assert form.name == name and form.description and form.suffixes
    writer = form.load()
    assert list(inspect.signature(writer).parameters) == SIGNATURE
    assert all(p.default is inspect.Parameter.empty for p in inspect.signature(writer).parameters.values())


def test_the_command_s_choices_and_help_are_the_table_s() -> None:
    import argparse

    p = argparse.ArgumentParser()
    COMMAND.add_arguments(p, None)
    (fmt,) = [a for a in p._actions if a.dest == "format"]
    assert list(fmt.choices or ()) == list(FORMATS)
    assert COMMAND.description is not None
    for f in FORMATS.values():
        assert f"{f.name}: {f.description}" in COMMAND.description
    assert output_names() == "OUT.json, OUT.json.gz or OUT.pb.gz"


def _fake_writer(path: str, out: str, config: Config, trace: bool) -> ExportResult:
    with open(out, "w") as fh:
        fh.write(f"{path} {trace} {config.findings.gpu_idle_busy}")
    return ExportResult(out, 1)


def test_a_format_in_the_table_is_exported_by_its_writer(monkeypatch, tmp_path) -> None:
    fake = ExportFormat("fake", (".txt",), "a test's", f"{__name__}:_fake_writer")
    monkeypatch.setitem(formats.FORMATS, "fake", fake)
    out = str(tmp_path / "o.txt")
    assert export(RECORDING, "fake", out).events == 1
    with open(out) as fh:
        assert fh.read() == f"{RECORDING} False 0.5"
    monkeypatch.delitem(formats.FORMATS, "fake")
    with pytest.raises(UsageError, match="unknown export format 'fake'"):
        export(RECORDING, "fake", out)


def test_a_trace_is_refused_by_the_writer_that_cannot_hold_it(tmp_path) -> None:
    trace = str(data.TRACES / "cpu_only_rank34.json.gz")
    with pytest.raises(UsageError, match=r"already is a torch\.profiler trace"):
        export(trace, "kineto", str(tmp_path / "o.json"))
