"""What the collectors said along the way reaches the report's ``sampling.notes``: a py-spy
window that failed and why, windows lengthened on a busy host, the agent lowering its duty
cycle; not their start-up words, not NVML's "no GPU" (the GPU section says it)."""

from __future__ import annotations

from infertop.analysis.session import Session
from infertop.model.events import CollectorStatus


def test_the_news_of_the_collectors_is_kept_once_each_in_order() -> None:
    s = Session()
    said = [
        ("py-spy", "running", "50 Hz, all threads, pid 7 and its child processes"),
        ("nvml", "unavailable", "no GPU: NVML library not found"),
        ("agent", "running", "torch.profiler 0.25 s every 10 s"),
        ("py-spy", "running", "py-spy takes 2.3 s to start on this host: sampling in 7 s windows"),
        ("py-spy", "running", "py-spy: py-spy cannot sample process 7: x (window 1 in a row)"),
        ("py-spy", "running", "py-spy: py-spy cannot sample process 7: x (window 1 in a row)"),
        ("agent", "running", "windows cost the target ~195 ms each: one every 13 s instead of 10 s"),
        ("agent", "running", "detached"),
    ]
    for i, (who, state, text) in enumerate(said):
        s.apply(CollectorStatus(float(i), who, state, text))
    assert list(s.status_notes) == [
        "py-spy: py-spy takes 2.3 s to start on this host: sampling in 7 s windows",
        "py-spy: py-spy: py-spy cannot sample process 7: x (window 1 in a row)",
        "agent: windows cost the target ~195 ms each: one every 13 s instead of 10 s",
    ]


def test_the_functions_the_wrappers_could_not_reach_are_a_note() -> None:
    """On Python 3.10/3.11 the agent says once which timed functions no dictionary holds (their
    calls go untimed): the report's notes keep it."""
    s = Session()
    text = "Python 3.11: 1 timed functions not reached (no dictionary holds them): x.py:f"
    s.apply(CollectorStatus(0.0, "agent", "running", text))
    assert list(s.status_notes) == [f"agent: {text}"]
