"""The demo on its own Python (the dev venv's, 3.11: the agent's wrappers), no flag given: its
slow-calls view (l) opens on a timed stage and says which stages it cannot show, why, and the
rule to give; ``watch --trigger auto`` on the demo's sample arms on the stages the agent timed
and says, on which Python and why, which ones no trigger can watch."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from .helpers import INFERTOP, start_target, stop_target
from .test_tmux_e2e import Tmux

pytestmark = [pytest.mark.slow, pytest.mark.long]  # the demo and a watch: ~30 s each
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_demo_s_slow_calls_view_shows_a_tail_and_says_what_it_cannot(tmp_path) -> None:
    term = Tmux(f"TMPDIR={tmp_path} {sys.executable} -m infertop demo", width=160, height=50)
    try:
        # the stage panel's border offers the view once a stage has timed calls; the planted
        # tokenizer has none: its latency cell and a row say so, why, and the rule to give (its
        # own function, from the flame, once the flame holds a few seconds of it)
        rule = "--stage 'preprocess=*textgen_service.py:tokenize_batch'"
        screen = term.wait_for(lambda s: "l: slow calls" in s and rule in s, timeout=60)
        assert "latency     preprocess" in screen and f"on Python {PYTHON}" in screen, screen
        assert "no timed calls" in screen, screen
        term.keys("l")
        # a stage the wrappers time with no flag (the model's forward, json.dumps: the view opens
        # on the one whose tail stands out most): its slow calls and the frames they have more of
        screen = term.wait_for(lambda s: ("tail · forward" in s or "tail · serialize" in s)
                               and "slow ≥" in s, timeout=30)  # fmt: skip
        assert "frames the slow calls have more of" in screen, screen
        words = " ".join(screen.replace("│", " ").split())  # the line wraps in its box
        assert "not here: preprocess" in words and "no rule names their functions" in words, screen
        term.keys("Escape")
        term.wait_for(lambda s: "tail · " not in s, timeout=20)
        term.keys("q")
        term.wait_for(lambda s: "EXITED-0" in s, timeout=20)
    finally:
        term.kill()


def test_watch_auto_on_the_demo_s_sample_arms_and_says_what_it_cannot_watch(tmp_path) -> None:
    target = start_target(["-m", "samples.textgen_service", "--slow-tokenizer"])
    watch = None
    try:
        watch = subprocess.Popen(
            INFERTOP + ["watch", str(target.pid), "--out", str(tmp_path / "inc"), "--trigger", "auto",
                        "--duration", "30"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        _, err = watch.communicate(timeout=120)
        alive = target.poll() is None
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
            watch.communicate()
        _, target_err = stop_target(target)
    assert watch.returncode == 0, err
    assert alive and target_err == "", target_err[-2000:]
    # the agent's wrappers timed the model's forward and json.dumps: the trigger watches them
    armed = " ".join(ln for ln in err.splitlines() if ln.startswith("auto trigger watching"))
    assert "forward" in armed and "serialize" in armed, err
    # the tokenizer has py-spy's share only: said once, with the Python, the reason and the rule
    said = [ln for ln in err.splitlines() if ln.startswith("infertop watch: the triggers cannot watch")]
    assert said, err  # (said again only if another stage joins it, or the reason changes)
    assert said[0].startswith("infertop watch: the triggers cannot watch preprocess"), said
    assert f"no timed calls on Python {PYTHON}" in said[0] and "no rule names their functions" in said[0]
    assert "--stage preprocess=FUNCTION" in said[0], said
