"""A stand-in for Triton's Python-backend stub process (``triton_python_backend_stub``), which
no package registry here has (not a test itself). It does what the stub does with a model, in
the same order: puts the backend's folder on ``sys.path`` (``triton_python_backend_utils``),
loads ``MODELS/NAME/1/model.py`` and puts its ``TritonPythonModel`` on ``sys``, makes one
instance, calls ``initialize`` with the model's configuration, then calls ``execute`` on its
main thread with each batch of requests. The server's part, done in C++ in Triton, is played
by three client threads (each sends a request and waits for its response) and the dynamic
batcher of ``config.pbtxt`` (up to 8 requests, 5 ms). Rewrites ``--status`` every 0.2 s: its
pid, and each ``execute`` call's own duration (ms, perf_counter around the call) and batch size
-- the truth the agent's default timing of ``execute`` is held to.

    python stub.py --models DIR --model embed --status FILE
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import queue
import random
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_model(models: Path, name: str) -> object:
    sys.path.insert(0, str(HERE))  # the backend's folder: triton_python_backend_utils
    path = models / name / "1" / "model.py"
    spec = importlib.util.spec_from_file_location("model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.TritonPythonModel = module.TritonPythonModel  # as the stub's StubSetup does
    instance = sys.TritonPythonModel()
    config = (models / name / "config.pbtxt").read_text()
    instance.initialize({"model_config": json.dumps({"name": name, "pbtxt": config}),
                         "model_name": name, "model_version": "1",
                         "model_instance_kind": "CPU", "model_instance_device_id": "0"})  # fmt: skip
    return instance


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=Path, default=HERE / "models")
    ap.add_argument("--model", default="embed")
    ap.add_argument("--status", required=True)
    args = ap.parse_args()
    import numpy as np
    import triton_python_backend_utils as pb_utils  # noqa: E402 (the backend's folder first)

    model = load_model(args.models, args.model)
    pending: queue.Queue = queue.Queue()
    lock = threading.Lock()
    state: dict = {"pid": os.getpid(), "executions": 0, "execute_ms": [], "batch": []}

    def client(i: int) -> None:
        rng = random.Random(i)
        while True:
            words = " ".join("w%d" % rng.randrange(5000) for _ in range(rng.randint(300, 600)))
            text = pb_utils.Tensor("TEXT", np.array([words.encode()], dtype=object))
            done = threading.Event()
            pending.put((pb_utils.InferenceRequest([text], f"c{i}"), done))
            done.wait()

    def write_status() -> None:
        while True:
            time.sleep(0.2)
            with lock:
                snap = {k: list(v) if isinstance(v, list) else v for k, v in state.items()}
            tmp = args.status + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"t": time.time(), **snap}, fh)
            os.replace(tmp, args.status)

    for i in range(3):
        threading.Thread(target=client, args=(i,), daemon=True).start()
    threading.Thread(target=write_status, daemon=True).start()
    while True:  # the stub's main thread: one batch, one execute
        batch = [pending.get()]
        until = time.monotonic() + 0.005
        while len(batch) < 8:
            try:
                batch.append(pending.get(timeout=max(0.0, until - time.monotonic())))
            except queue.Empty:
                break
        t0 = time.perf_counter()
        responses = model.execute([req for req, _ in batch])
        took = (time.perf_counter() - t0) * 1000.0
        assert len(responses) == len(batch)
        with lock:
            state["executions"] += 1
            state["execute_ms"].append(round(took, 4))
            state["batch"].append(len(batch))
        for _, done in batch:
            done.set()


if __name__ == "__main__":
    main()
