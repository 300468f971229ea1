"""A target for annotation and custom-rule tests: three busy functions no default rule knows.

``crunch`` is claimed by a ``--stage`` rule in the tests, ``ingest`` by ``@infertop.stage``, and
``churn`` stays ``other``. Each takes a third of the main thread's time: the three spin equally
long in each round, a length drawn from 4-16 ms, so that a sampler's period cannot lock onto
the rounds' phase (with a fixed 10 ms each, 100 Hz samples can fall on one function again and
again for as long as their clocks stay in step).
"""

import math
import random
import sys
import time

import infertop


def _spin(seconds: float) -> float:
    end = time.perf_counter() + seconds
    acc = 0.0
    while time.perf_counter() < end:
        acc += math.sqrt(acc + 1.0)
    return acc


def crunch(seconds: float) -> float:
    return _spin(seconds)


@infertop.stage("ingest")
def ingest(seconds: float) -> float:
    return _spin(seconds)


def churn(seconds: float) -> float:
    return _spin(seconds)


def main() -> None:
    print("ready", flush=True)
    deadline = time.time() + float(sys.argv[1]) if len(sys.argv) > 1 else float("inf")
    rng = random.Random(1)
    while time.time() < deadline:
        seconds = rng.uniform(0.004, 0.016)
        crunch(seconds)
        ingest(seconds)
        churn(seconds)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
