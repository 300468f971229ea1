"""Committed fixtures without the paths of the machine that made them.

A recording made in a checkout holds the frames' full paths (``/work/main/samples/...``, the
interpreter's ``/root/.pyenv/versions/...``), the target's command line and its markers'
folders, and every output made from it (a golden report, an export, an SVG snapshot) repeats
them. Left so, a fixture names one machine's folders and reads differently from a test run in
a checkout elsewhere.

``scrub_text`` writes a path inside the repository relative to it
(``samples/textgen_service.py``) and a home folder as ``~`` (``~/.pyenv/versions/...``).
``scrub_recording`` rewrites every string of a recording so, record by record, each record's
CRC recomputed and nothing else changed; the golden and snapshot tests pass what they compare
and write through ``scrub_text`` (``INFERTOP_UPDATE_GOLDEN=1``, ``INFERTOP_UPDATE_SNAPSHOTS=1``).
``leaks`` finds what is left: ``tests/unit/test_fixture_paths.py`` fails on any.

A new recording is scrubbed in place before it is committed (tests/data/recordings/README.md)::

    python -m tests.support.fixture_paths tests/data/recordings/NEW.infertop
    python -m tests.support.fixture_paths --root /where/it/was/made FILE   # made in another checkout
"""

from __future__ import annotations

import argparse
import gzip
import re
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

import msgpack

#: the checkout these tests run in
REPO = Path(__file__).resolve().parents[2]
#: the committed fixtures: recordings, traces, goldens, snapshots, NVML and export fixtures, and
#: the README's screenshot
FIXTURE_DIRS = ("tests/data", "tests/fixtures")
FIXTURE_FILES = ("docs/screenshot.svg",)

#: a home folder at the start of a path: ``/root``, ``/home/NAME``, ``/Users/NAME``
_HOME = re.compile(
    r"(?<![\w.~-])(?:/root|/home/[^/\s\"'<>:]+|/Users/[^/\s\"'<>:]+)(?=/|[\s\"'<>:,;)\]]|$)"
)
#: what a committed fixture must not hold: a home folder, a usual work tree's root (CI runners'
#: and this project's machines'), bytes as they are in the file (msgpack, gzip opened)
_LEAK = re.compile(rb"/(?:root|home/[^/\s\"'<>]+|Users/[^/\s\"'<>]+|work|workspace|builds)/")

_HEADER = 12  # "INFERTOP", u16 major, u16 minor
_RECORD = struct.Struct(">II")  # length, crc32 of the payload


def scrub_text(text: str, roots: Iterable[str | Path] = (REPO,)) -> str:
    """``text`` with every path under one of ``roots`` relative to it and a home folder as ``~``."""
    for root in sorted({str(r).rstrip("/") for r in roots}, key=len, reverse=True):
        if not root:
            continue
        text = text.replace(root + "/", "")
        text = re.sub(re.escape(root) + r"(?![\w.-])", ".", text)
    return _HOME.sub("~", text)


def _map_strings(value: object, change: Callable[[str], str]) -> object:
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [_map_strings(v, change) for v in value]
    if isinstance(value, dict):
        return {_map_strings(k, change): _map_strings(v, change) for k, v in value.items()}
    return value


def rewrite_strings(data: bytes, change: Callable[[str], str]) -> bytes:
    """A ``.infertop`` file's bytes with ``change`` applied to every string of every event; the
    header and any bytes after the last whole record are kept as they are, and a record whose
    CRC fails is refused. Nothing but the strings changes: an unchanged file comes back byte for
    byte."""
    if data[:8] != b"INFERTOP":
        raise ValueError("not a recording (no INFERTOP header)")
    out, at = [data[:_HEADER]], _HEADER
    while at + _RECORD.size <= len(data):
        length, crc = _RECORD.unpack_from(data, at)
        payload = data[at + _RECORD.size : at + _RECORD.size + length]
        if len(payload) < length:
            break  # a record cut short: left as it is, as a reader would stop there
        if zlib.crc32(payload) != crc:
            raise ValueError(f"record at byte {at} fails its CRC: not rewriting a damaged file")
        events = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        new = msgpack.packb(_map_strings(events, change), use_bin_type=True)
        out.append(_RECORD.pack(len(new), zlib.crc32(new)) + new)
        at += _RECORD.size + length
    out.append(data[at:])
    return b"".join(out)


def scrub_recording_bytes(data: bytes, roots: Iterable[str | Path] = (REPO,)) -> bytes:
    """A ``.infertop`` file's bytes with every string scrubbed (``scrub_text``)."""
    roots = tuple(str(r) for r in roots)
    return rewrite_strings(data, lambda s: scrub_text(s, roots))


def scrub_file(path: Path, roots: Iterable[str | Path] = (REPO,)) -> bool:
    """Scrub one fixture in place (a recording record by record, any other file as text);
    True where it changed."""
    data = path.read_bytes()
    if data[:8] == b"INFERTOP":
        new = scrub_recording_bytes(data, roots)
    elif path.name.endswith(".gz"):
        raise ValueError(f"{path}: a gzip fixture is a trace as published, not rewritten here")
    else:
        new = scrub_text(data.decode("utf-8"), roots).encode("utf-8")
    if new == data:
        return False
    path.write_bytes(new)
    return True


def fixtures(repo: Path = REPO) -> list[Path]:
    """Every committed (or staged) fixture file under ``repo``; without git, every file there.
    A scratch recording that ``.gitignore`` keeps out (``*.infertop``) is not a fixture."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", *FIXTURE_DIRS, *FIXTURE_FILES],
            cwd=repo,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        found = [p for d in FIXTURE_DIRS for p in sorted((repo / d).rglob("*")) if p.is_file()]
        return found + [repo / f for f in FIXTURE_FILES if (repo / f).is_file()]
    return [repo / name for name in listed.decode().split("\0") if name and (repo / name).is_file()]


def leaks(path: Path, repo: Path = REPO) -> list[str]:
    """The machine paths in one fixture: a home folder, a work tree's root, or ``repo`` itself."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    found = {m.group(0).decode("utf-8", "replace") for m in _LEAK.finditer(data)}
    if str(repo).encode() + b"/" in data:
        found.add(str(repo) + "/")
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.support.fixture_paths",
        description="Scrub fixtures in place: paths in the repository made relative to it, a "
        "home folder written as ~. Recordings are rewritten record by record.",
    )
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument(
        "--root",
        action="append",
        default=[],
        help="the checkout the fixture was made in, where that is not this one (repeatable)",
    )
    args = ap.parse_args(argv)
    roots = [REPO, *args.root]
    left = 0
    for path in args.files:
        changed = scrub_file(path, roots)
        rest = leaks(path)
        left += len(rest)
        print(f"{path}: {'scrubbed' if changed else 'clean already'}"
              + (f"; still holds {', '.join(rest)}" if rest else ""))  # fmt: skip
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
