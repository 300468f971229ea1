"""What finding the models costs in a process that froze its heap (``gc.freeze()``, as a Ray
Serve replica does after its deployment's ``__init__``): ``gc.get_objects()`` (what the agent
reads in any process) against the walk of what the loaded modules reach
(``stages.frozen_reachable``), with torch, transformers (a BertModel) and Ray Serve loaded.
Prints the medians of 5 rounds and whether the model was found.

    .venv312/bin/python benchmarks/bench_frozen_walk.py
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402,F401
from transformers import BertConfig, BertModel  # noqa: E402

from infertop.agent.payload import stages  # noqa: E402

try:
    from ray import serve  # noqa: F401  (a replica's modules, where installed)
except ImportError:
    pass


class Holder:  # what a replica's object graph does: an instance holding the model
    def __init__(self) -> None:
        self.model = BertModel(BertConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=2,
                                          intermediate_size=128))  # fmt: skip


sys.modules[__name__].holder = Holder()
gc.freeze()


def timed(fn) -> tuple[float, object]:
    out = []
    for _ in range(5):
        stages._FROZEN_CACHE[1] = None
        t = time.perf_counter()
        res = fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1000.0, res


ms_gc, objs = timed(gc.get_objects)
ms_walk, reached = timed(stages.frozen_reachable)
ms_models, codes = timed(stages.find_model_codes)
print(f"frozen objects: {gc.get_freeze_count()}")
print(f"gc.get_objects(): {ms_gc:.1f} ms, {len(objs)} objects (the frozen ones left out)")
print(f"frozen_reachable(): {ms_walk:.1f} ms, {len(reached)} objects")
print(f"find_model_codes(): {ms_models:.1f} ms, found {[c.co_qualname for c in codes]}")
