"""A request loop of three stages side by side: tokenize (~26 %), forward (~47 %), serialize
(~24 %) of the CPU, each pure Python work in its own function, called from one ``handle``.
The shape issue 15's flame must show at once: three siblings under one caller.

    python tests/integration/targets/stage_loop.py
"""

from __future__ import annotations

import json
import signal
import sys
import time

STOP = False


def _stop(*_: object) -> None:
    global STOP
    STOP = True


def _spin(seconds: float) -> int:
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += 1
    return n


def tokenize(text: str) -> list[int]:
    _spin(0.026)
    return [len(w) for w in text.split()]


def forward(ids: list[int]) -> list[float]:
    _spin(0.047)
    return [i * 0.5 for i in ids]


def serialize(out: list[float]) -> str:
    _spin(0.024)
    return json.dumps(out)


def handle(text: str) -> str:
    return serialize(forward(tokenize(text)))


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print("ready", flush=True)
    while not STOP:
        handle("the quick brown fox jumps over the lazy dog")
        time.sleep(0.003)  # between requests
    return 0


if __name__ == "__main__":
    sys.exit(main())
