"""A request loop with planted spells of slow calls, for ``infertop watch``'s tests.

    python tests/integration/targets/spell_loop.py [--forward-ms MS] [--preprocess-ms MS]
        [STAGE:START:LENGTH:FACTOR ...]

Each request is ``preprocess`` (default 2 ms; 0: no such stage) then ``forward`` (default
10 ms, a small torch op inside), both ``@infertop.stage`` annotations (so the agent sees every
call on any Python). A spell ``forward:1700000030.5:4:4`` makes ``forward`` 4× slower from
that unix time on, for 4 s. Spells come from the command line or, one a line, from stdin
while it runs. The calls sleep rather than spin, so a busy machine stretches them little.
Prints ``ready`` once torch is imported (the agent can be injected from then on).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

import torch

import infertop

STOP = False
SPELLS: list[tuple[str, float, float, float]] = []
MS = {"forward": 10.0, "preprocess": 2.0}


def _stop(*_: object) -> None:
    global STOP
    STOP = True


def _seconds(stage: str) -> float:
    now, factor = time.time(), 1.0
    for name, start, length, slower in SPELLS:
        if name == stage and start <= now < start + length:
            factor = slower
    return MS[stage] * factor / 1000.0


@infertop.stage("preprocess")
def preprocess(text: str) -> torch.Tensor:
    time.sleep(_seconds("preprocess"))
    return torch.tensor([float(len(w)) for w in text.split()])


@infertop.stage("forward")
def forward(x: torch.Tensor) -> torch.Tensor:
    time.sleep(_seconds("forward"))
    return torch.relu(x * 2.0 - 3.0)


def _spell(text: str) -> None:
    stage, start, length, factor = text.strip().split(":")
    SPELLS.append((stage, float(start), float(length), float(factor)))


def _read_spells() -> None:
    for line in sys.stdin:
        if line.strip():
            _spell(line)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--forward-ms", type=float, default=MS["forward"])
    p.add_argument("--preprocess-ms", type=float, default=MS["preprocess"])
    p.add_argument("spells", nargs="*")
    args = p.parse_args()
    MS.update(forward=args.forward_ms, preprocess=args.preprocess_ms)
    for text in args.spells:
        _spell(text)
    threading.Thread(target=_read_spells, name="spells", daemon=True).start()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    text = "the quick brown fox jumps over the lazy dog"
    x = torch.tensor([float(len(w)) for w in text.split()])
    print("ready", flush=True)
    with torch.no_grad():
        while not STOP:
            forward(preprocess(text) if MS["preprocess"] > 0 else x)
    return 0


if __name__ == "__main__":
    sys.exit(main())
