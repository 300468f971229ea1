"""A busy 8-thread Python service for benchmarks: every thread works all the time.

Threads rotate through tokenizing-like string work, JSON serialization, arithmetic and a
deep call chain, so py-spy sees many distinct stacks (a heavy load for aggregation and the
flame view). Runs until killed.
"""

from __future__ import annotations

import json
import math
import sys
import threading


def tokenize_words(text: str) -> list[int]:
    return [hash(w) % 30000 for w in text.split()]


def serialize_result(values: list[int]) -> str:
    return json.dumps({"ids": values, "scores": [v / 7 for v in values]})


def forward_math(n: int) -> float:
    return sum(math.sin(i) * math.cos(i) for i in range(n))


def deep(level: int, n: int) -> float:
    return forward_math(n) if level == 0 else deep(level - 1, n)


def worker(k: int) -> None:
    text = " ".join(f"word{i}" for i in range(300))
    while True:
        ids = tokenize_words(text)
        serialize_result(ids)
        deep(k % 6 + 2, 2000)


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    for k in range(threads):
        threading.Thread(target=worker, args=(k,), name=f"worker-{k}", daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
