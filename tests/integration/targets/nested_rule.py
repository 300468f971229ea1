"""A loop whose work is a function defined inside another one (no module or class holds it, so
the agent's wrappers cannot reach it before Python 3.12), then ``json.dumps`` (timed by default),
until killed."""

import json
import time


def make():
    def crunch(n):
        return sum(i * i for i in range(n))

    return crunch


def main() -> None:
    crunch = make()
    while True:
        crunch(100_000)
        json.dumps({"a": list(range(200))})
        time.sleep(0.002)


if __name__ == "__main__":
    main()
