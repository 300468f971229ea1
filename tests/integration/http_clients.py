"""Clients that load a real HTTP server from the tests: each on one kept-alive connection, as a
load generator holds them, posting JSON until stopped, with each request's start (unix s) and
latency (ms) as the client saw it -- the yardstick of the request-latency tests."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JsonClients:
    """``n`` client threads posting ``{"text": ...}`` (120 words, a different text each) to
    ``path`` until ``close()``; ``seen``: (start, ms) of each request, ``errors``: what went
    wrong (a status other than 200, a connection lost before ``close``)."""

    def __init__(self, port: int, path: str, n: int = 3, timeout: float = 30) -> None:
        self.port, self.path, self.timeout = port, path, timeout
        self.stop = threading.Event()
        self.seen: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def _run(self, i: int) -> None:
        body = json.dumps({"text": " ".join(f"w{(i * 7 + k) % 2000}" for k in range(120))})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            while not self.stop.is_set():
                start, t = time.time(), time.perf_counter()
                conn.request("POST", self.path, body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.status != 200:
                    self.errors.append(f"{r.status} {data[:200]!r}")
                    return
                self.seen.append((start, (time.perf_counter() - t) * 1000.0))
        except OSError as exc:
            if not self.stop.is_set():
                self.errors.append(repr(exc))
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(self.timeout * 2)
