"""A Triton Python-backend model as its documentation has one written: ``TritonPythonModel``
with ``initialize``, ``execute`` (a batch of requests in, one response each out) and
``finalize``. ``execute`` turns each request's text into ids (hashed character trigrams, in
Python) and embeds them with a small torch model (an embedding and an MLP)."""

import json

import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class Encoder(torch.nn.Module):
    def __init__(self, vocab, dim=128):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mlp = torch.nn.Sequential(
            *[torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim)) for _ in range(3)]
        )

    def forward(self, input_ids):
        h = self.embed(input_ids)
        for block in self.mlp:
            h = h + block(h)
        return h.mean(dim=1)


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        torch.set_num_threads(1)
        self.model = Encoder(2048).eval()

    def ids_of(self, text):
        ids = []
        for word in text.lower().split():
            w = "#%s#" % word
            ids.extend(sum(map(ord, w[i : i + 3])) * 31 % 2048 for i in range(len(w) - 2))
        return np.array(ids[:128] or [0], dtype=np.int64)

    def execute(self, requests):
        texts = [pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy() for r in requests]
        ids = [self.ids_of(t.reshape(-1)[0].decode()) for t in texts]
        width = max(a.shape[-1] for a in ids)
        batch = np.zeros((len(ids), width), dtype=np.int64)
        for i, a in enumerate(ids):
            batch[i, : a.shape[-1]] = a.reshape(-1)
        with torch.inference_mode():
            out = self.model(torch.from_numpy(batch)).numpy()
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("EMBEDDING", out[i : i + 1])])
            for i in range(len(requests))
        ]

    def finalize(self):
        self.model = None
