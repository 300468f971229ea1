"""The real ``go tool pprof`` (Debian's golang-go; ``.ci/run`` installs it) as a reader of the
profiles infertop writes and pushes."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

GO = shutil.which("go")
needs_go = pytest.mark.skipif(
    GO is None, reason="go tool pprof is absent (Debian's golang-go; .ci/run installs it)"
)


def pprof(*args: str) -> str:
    assert GO is not None
    res = subprocess.run(
        [GO, "tool", "pprof", *args], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def traces(path: str, *flags: str) -> list[tuple[dict[str, str], int, list[str]]]:
    """``go tool pprof -traces``: each sample's labels, value and frames (leaf first)."""
    out = []
    for block in pprof("-traces", *flags, path).split("-----------+")[1:]:
        labels: dict[str, str] = {}
        value, frames = None, []
        for line in block.splitlines()[1:]:
            m = re.match(r"^\s+(\w+):\s+(.*)$", line)
            if value is None and m:
                labels[m.group(1)] = m.group(2).strip()
                continue
            m = re.match(r"^\s+(\d+)\s+(.*)$", line)
            if value is None and m:
                value, frames = int(m.group(1)), [m.group(2).strip()]
            elif value is not None and line.strip():
                frames.append(line.strip())
        if value is not None:
            out.append((labels, value, frames))
    return out
