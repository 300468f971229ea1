"""The committed fixtures hold no path of the machine they were made on (issue 47, item 9).

Recordings, goldens, SVG snapshots, the NVML and export fixtures and the README's screenshot
read the same wherever the repository is: a path in the repository is relative to it, a home
folder is ``~`` (``tests/support/fixture_paths.py``, which the golden and snapshot tests write
through). A fixture that still names a home folder, a work tree's root or this checkout fails
here, with the way to scrub it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infertop.record.reader import read_recording
from tests.support import data
from tests.support.fixture_paths import (
    REPO,
    fixtures,
    leaks,
    rewrite_strings,
    scrub_recording_bytes,
    scrub_text,
)

RECORDING = data.DATA / "recordings" / "textgen_service.infertop"


def test_no_committed_fixture_holds_a_path_of_a_home_or_a_work_tree() -> None:
    found = fixtures()
    assert len(found) >= 60, f"the fixtures were not found under {REPO}"
    dirty = {str(p.relative_to(REPO)): hit for p in found if (hit := leaks(p))}
    assert not dirty, (
        f"fixtures with the recording machine's paths: {dirty}; scrub them with "
        "`python -m tests.support.fixture_paths FILE` (a recording), or regenerate the goldens "
        "and snapshots (INFERTOP_UPDATE_GOLDEN=1, INFERTOP_UPDATE_SNAPSHOTS=1), which scrub"
    )


@pytest.mark.parametrize(
    "text,want",
    [
        ("/ck/samples/textgen_service.py", "samples/textgen_service.py"),
        ("python /ck/samples/a.py --out /ck/x.json", "python samples/a.py --out x.json"),
        ("cwd /ck", "cwd ."),
        ("/ck2/samples/a.py", "/ck2/samples/a.py"),  # another folder that starts alike
        ("/root/.pyenv/versions/3.12.1/lib/python3.12/threading.py",
         "~/.pyenv/versions/3.12.1/lib/python3.12/threading.py"),
        ("/home/ann/.local/lib/x.py and /Users/bo/y.py", "~/.local/lib/x.py and ~/y.py"),
        ("/root", "~"),
        ("/tmp/torchinductor_root/a.py", "/tmp/torchinductor_root/a.py"),
        ("/rooted/a.py /usr/lib/python3.11/json/encoder.py", "/rooted/a.py /usr/lib/python3.11/json/encoder.py"),
    ],
)  # fmt: skip
def test_scrub_text_makes_the_checkout_relative_and_a_home_a_tilde(text: str, want: str) -> None:
    assert scrub_text(text, ["/ck"]) == want


def test_a_recording_made_in_another_checkout_scrubs_to_the_committed_one(tmp_path: Path) -> None:
    """The committed recording, as if recorded in /home/ann/src/infertop: the leak check finds
    it, and scrubbing with that root gives back the committed bytes, which read the same."""
    if not RECORDING.is_file():
        pytest.fail(f"test data missing: {RECORDING}")
    committed = RECORDING.read_bytes()
    root = "/home/ann/src/infertop"
    in_repo = re.compile(r"(?<![\w./~-])(?=(?:samples|tests|\.venv)/)")

    def as_made_there(s: str) -> str:
        return in_repo.sub(root + "/", s).replace("~/", "/home/ann/")

    made = tmp_path / "made.infertop"
    made.write_bytes(rewrite_strings(committed, as_made_there))
    assert root + "/samples/" in made.read_bytes().decode("latin-1")
    assert leaks(made), "the leak check missed a home folder"
    assert rewrite_strings(committed, lambda s: s) == committed  # a rewrite changes nothing else

    scrubbed = tmp_path / "scrubbed.infertop"
    scrubbed.write_bytes(scrub_recording_bytes(made.read_bytes(), [root]))
    assert scrubbed.read_bytes() == committed
    again = read_recording(str(scrubbed))
    assert again.warning is None and len(again.events) == len(read_recording(str(RECORDING)).events)
