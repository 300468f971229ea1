"""A request loop with planted spells of slow calls, for ``infertop watch``'s tests.

    python tests/integration/targets/spell_loop.py [STAGE:START:LENGTH ...]
    (or the same spells, one a line, on its stdin while it runs)

Each request is ``preprocess`` (~2 ms) then ``forward`` (~10 ms, a small torch op inside),
both ``@infertop.stage`` annotations (so the agent sees every call on any Python). A spell
``forward:1700000030.5:4`` makes ``forward`` 4× slower from that unix time on, for 4 s
(``preprocess``: 12×). The calls sleep rather than spin, so a busy machine stretches them
little. Prints ``ready`` once torch is imported (the agent can be injected from then on).
"""

from __future__ import annotations

import signal
import sys
import threading
import time

import torch

import infertop

STOP = False
SPELLS: list[tuple[str, float, float]] = []
SLOWER = {"forward": 4.0, "preprocess": 12.0}


def _stop(*_: object) -> None:
    global STOP
    STOP = True


def _factor(stage: str) -> float:
    now = time.time()
    for name, start, length in SPELLS:
        if name == stage and start <= now < start + length:
            return SLOWER[stage]
    return 1.0


@infertop.stage("preprocess")
def preprocess(text: str) -> torch.Tensor:
    time.sleep(0.002 * _factor("preprocess"))
    return torch.tensor([float(len(w)) for w in text.split()])


@infertop.stage("forward")
def forward(x: torch.Tensor) -> torch.Tensor:
    time.sleep(0.010 * _factor("forward"))
    return torch.relu(x * 2.0 - 3.0)


def _spell(text: str) -> None:
    stage, start, length = text.strip().split(":")
    SPELLS.append((stage, float(start), float(length)))


def _read_spells() -> None:
    for line in sys.stdin:
        if line.strip():
            _spell(line)


def main() -> int:
    for arg in sys.argv[1:]:
        _spell(arg)
    threading.Thread(target=_read_spells, name="spells", daemon=True).start()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print("ready", flush=True)
    with torch.no_grad():
        while not STOP:
            forward(preprocess("the quick brown fox jumps over the lazy dog"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
