"""What the README promises a newcomer stays true (issue 47, item 8): its set-up is two make
targets that exist, and its picture shows the demo's finding that its text describes."""

from __future__ import annotations

import html
import re

from tests.support.fixture_paths import REPO

README = REPO / "README.md"


def _screen_text(svg: str) -> str:
    """The characters an SVG screenshot draws, in order (Textual writes one ``<text>`` per run)."""
    return html.unescape("".join(re.findall(r">([^<>]*)</text>", svg))).replace("\xa0", " ")


def test_the_two_set_up_commands_are_stated_and_are_make_targets() -> None:
    text = README.read_text(encoding="utf-8")
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for target in ("demo", "test"):
        assert re.search(rf"^make {target}\b", text, re.M), (
            f"the README no longer says make {target}"
        )
        assert re.search(rf"^{target}:", makefile, re.M), f"the Makefile has no {target} target"
    assert (REPO / "docs" / "development.md").is_file() and "docs/development.md" in text


def test_the_picture_shows_the_finding_the_text_promises() -> None:
    text = README.read_text(encoding="utf-8")
    assert "](docs/screenshot.svg)" in text
    screen = _screen_text((REPO / "docs" / "screenshot.svg").read_text(encoding="utf-8"))
    # one finding, as the text says, and it is the planted bottleneck's
    assert "⚑ 1 finding (i)" in text and "preprocess-hot" in text
    assert "findings · 1" in screen and "1 finding" in screen, screen[:400]
    assert "preprocess-hot" in screen and "Tokenizer._encode_piece_slow" in screen
