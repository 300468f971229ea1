"""A LitServe server in miniature, as someone else would write one: an API process (uvicorn,
FastAPI) and an inference worker (spawned), dynamic batching of up to 8 requests within 20 ms.
The "model" is pure Python (the worker's ``predict`` works ~4 ms a request), so it runs on a
Python without torch. ``decode_request`` splits and hashes the words, as a tokenizer would.

    python litserve_app.py PORT
"""

from __future__ import annotations

import math
import sys
import time

import litserve as ls


class EmbedAPI(ls.LitAPI):
    def setup(self, device):  # noqa: ANN001
        self.weights = [math.sin(i) for i in range(4096)]

    def decode_request(self, request):  # noqa: ANN001
        return [hash(word) % 4096 for word in request["text"].split()]

    def predict(self, batch):  # noqa: ANN001
        out = []
        for ids in batch:
            end = time.perf_counter() + 0.004
            acc = 0.0
            while time.perf_counter() < end:
                for i in ids:
                    acc += self.weights[i]
            out.append(acc)
        return out

    def encode_response(self, output):  # noqa: ANN001
        return {"score": output}


if __name__ == "__main__":
    api = EmbedAPI(max_batch_size=8, batch_timeout=0.02)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1)
    server.run(port=int(sys.argv[1]), generate_client_file=False)
