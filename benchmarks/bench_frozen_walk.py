"""What finding functions and models costs the agent in a process that froze its heap
(``gc.freeze()``, as vLLM's processes and a Ray Serve replica do): ``gc.get_objects()`` (what
the agent reads in any process), the look through the loaded modules' and classes'
dictionaries (``stages.loaded_functions``, unpaced: its CPU), and the look at the threads'
stacks for a running model's forward (``stages.models_on_stacks``), with torch, transformers
(a BertModel) and Ray Serve loaded. Prints the medians of 5 rounds.

    .venv312/bin/python benchmarks/bench_frozen_walk.py
"""

from __future__ import annotations

import gc
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
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


def timed(fn) -> tuple[float, float, object]:
    """(median wall ms, median thread-CPU ms, the last result)."""
    wall, cpu = [], []
    for _ in range(5):
        t, c = time.perf_counter(), time.thread_time()
        res = fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
    return statistics.median(wall) * 1000.0, statistics.median(cpu) * 1000.0, res


class Unpaced(stages.Paced):
    def step(self) -> None:
        pass


stop = threading.Event()


def serve_forever() -> None:  # the model's forward running on another thread
    ids = torch.zeros(1, 16, dtype=torch.long)
    with torch.no_grad():
        while not stop.is_set():
            holder.model(ids)  # type: ignore[name-defined]  # noqa: F821


runner = threading.Thread(target=serve_forever, daemon=True)
runner.start()
time.sleep(0.5)
ms_gc, cpu_gc, objs = timed(gc.get_objects)
ms_fn, cpu_fn, funcs = timed(lambda: stages.loaded_functions(pace=Unpaced()))
ms_paced, cpu_paced, _ = timed(stages.loaded_functions)
ms_stack, cpu_stack, codes = timed(lambda: stages.models_on_stacks(sys._current_frames()))
stop.set()
print(f"frozen objects: {gc.get_freeze_count()}, modules loaded: {len(sys.modules)}")
print(f"gc.get_objects(): {ms_gc:.1f} ms, {len(objs)} objects (the frozen ones left out)")
print(f"loaded_functions() unpaced: {ms_fn:.1f} ms wall, {cpu_fn:.1f} ms CPU, {len(funcs)} functions")
print(f"loaded_functions() paced at {stages.DISCOVERY_CPU_SHARE:.0%} of a core: {ms_paced:.1f} ms "
      f"wall, {cpu_paced:.1f} ms CPU")
print(f"models_on_stacks(): {ms_stack * 1000:.0f} us, found {[c.co_qualname for c in codes]}")
