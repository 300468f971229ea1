"""A target for annotation and custom-rule tests: three busy functions no default rule knows.

``crunch`` is claimed by a ``--stage`` rule in the tests, ``ingest`` by ``@infertop.stage``, and
``churn`` stays ``other``. Each takes about a third of the main thread's time.
"""

import math
import sys
import time

import infertop


def _spin(seconds: float) -> float:
    end = time.perf_counter() + seconds
    acc = 0.0
    while time.perf_counter() < end:
        acc += math.sqrt(acc + 1.0)
    return acc


def crunch() -> float:
    return _spin(0.01)


@infertop.stage("ingest")
def ingest() -> float:
    return _spin(0.01)


def churn() -> float:
    return _spin(0.01)


def main() -> None:
    print("ready", flush=True)
    deadline = time.time() + float(sys.argv[1]) if len(sys.argv) > 1 else float("inf")
    while time.time() < deadline:
        crunch()
        ingest()
        churn()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
