"""A stand-in live collector (no process): made-up sample windows and forward calls up to
now, for the loops that run on a live source (watch, the push)."""

from __future__ import annotations

import time

from infertop.collect.pyspy import RawSampleWindow
from infertop.model.events import Frame, StageSpan

STACK = (Frame("<module>", "/srv/serve.py", 1), Frame("forward", "/srv/model.py", 10))


class Live:
    """A collector of made-up live data: every poll, a sample window and ten forward calls
    up to now; it also takes watch's requests (profile_now, sample_faster)."""

    name = "stand-in"

    def __init__(self) -> None:
        self.last = time.time()
        self.asked: list[str] = []

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def poll(self) -> list[object]:
        now = time.time()
        t0, self.last = self.last, now
        out: list[object] = [RawSampleWindow(t0, now, 100.0, 10, ((1, "MainThread", STACK, 5),))]
        step = (now - t0) / 10
        out += [StageSpan(1, "forward", t0 + k * step, t0 + (k + 1) * step) for k in range(10)]
        return out

    def profile_now(self) -> None:
        self.asked.append("profile_now")

    def sample_faster(self, interval: float, for_s: float) -> None:
        self.asked.append(f"sample_faster {interval:g} {for_s:g}")
