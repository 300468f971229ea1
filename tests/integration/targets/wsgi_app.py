"""A Flask app for gunicorn (sync workers), for the WSGI request test (any Python >= 3.10 with
flask and gunicorn; not a test itself): ``POST /predict`` parses its JSON body, "tokenizes" in
pure Python (~3 ms), runs a stand-in model (~8 ms of pure Python) and answers with
``json.dumps``; ``GET /health`` answers at once.

    gunicorn -w 2 -b 127.0.0.1:PORT --chdir tests/integration/targets wsgi_app:app
"""

from __future__ import annotations

import json
import time

from flask import Flask, Response, request

app = Flask(__name__)


def _busy(seconds: float, text: str) -> list[int]:
    end = time.perf_counter() + seconds
    ids = []
    while time.perf_counter() < end:
        ids = [hash(w) % 50000 for w in text.split()]
    return ids


def tokenize(text: str) -> list[int]:
    return _busy(0.003, text)


def model_forward(ids: list[int]) -> int:
    return len(_busy(0.008, " ".join(map(str, ids))))


@app.post("/predict")
def predict() -> Response:
    ids = tokenize(request.get_json(force=True)["text"])
    return Response(json.dumps({"n": model_forward(ids)}), mimetype="application/json")


@app.get("/health")
def health() -> str:
    return "ok"
