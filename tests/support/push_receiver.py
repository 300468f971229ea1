"""A profiling backend's stand-in on 127.0.0.1 for the push tests: it answers each request with
the next status of a script (then 200), keeps every request it was sent, and decodes their
bodies in the documented JSON forms of Pyroscope's ``PushRequest`` and Parca's
``WriteRawRequest`` (series labels and each sample's gzipped pprof, ``rawProfile``, base64),
or as OTLP's ``ExportProfilesServiceRequest``.

It can also be away: ``Receiver.reserved()`` holds a port that nobody listens on (connections
are refused) until ``start()`` binds it."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Got:
    """One request as it came: path, headers (lower-case names), body, and the status sent."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    t: float = field(default_factory=time.monotonic)

    def doc(self) -> dict:
        return json.loads(self.body)

    def otlp(self):
        """The body as OTLP's ``ExportProfilesServiceRequest``, read with the published
        definitions (the opentelemetry-proto package's compiled protos)."""
        from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2

        return profiles_service_pb2.ExportProfilesServiceRequest.FromString(self.body)

    def series(self) -> list[tuple[dict[str, str], list[bytes]]]:
        """Each series' labels and its samples' raw (gzipped pprof) profiles, in either
        backend's form."""
        out = []
        for s in self.doc()["series"]:
            labels = s["labels"]
            if isinstance(labels, dict):  # Parca: a LabelSet
                labels = labels["labels"]
            names = {lab["name"]: lab["value"] for lab in labels}
            out.append((names, [base64.b64decode(x["rawProfile"]) for x in s["samples"]]))
        return out


class Receiver:
    def __init__(self, script: list[int | tuple[int, dict[str, str]]] | None = None) -> None:
        self.script = list(script or [])
        self.got: list[Got] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._hold: socket.socket | None = None
        self.port = 0

    # -- up and away ---------------------------------------------------------------------------
    @classmethod
    def reserved(cls, script=None) -> Receiver:
        """A receiver whose port is known and refuses connections until ``start()``."""
        r = cls(script)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))  # bound, not listening: a connect is refused
        r._hold, r.port = s, s.getsockname()[1]
        return r

    def start(self) -> Receiver:
        if self._hold is not None:
            self._hold.close()
            self._hold = None
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, headers = owner._answer()
                with owner._lock:
                    owner.got.append(
                        Got(
                            self.path, {k.lower(): v for k, v in self.headers.items()}, body, status
                        )
                    )
                reply = b"{}" if status == 200 else f"scripted {status}".encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args) -> None:  # quiet
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._hold is not None:
            self._hold.close()
            self._hold = None

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- what it answers and what it got --------------------------------------------------------
    def _answer(self) -> tuple[int, dict[str, str]]:
        with self._lock:
            step = self.script.pop(0) if self.script else 200
        return step if isinstance(step, tuple) else (step, {})

    def taken(self) -> list[Got]:
        """The requests answered 200, in order."""
        with self._lock:
            return [g for g in self.got if g.status == 200]

    def wait_taken(self, n: int, timeout: float) -> list[Got]:
        """Poll until ``n`` requests were taken (fails after ``timeout`` s saying what came)."""
        deadline = time.monotonic() + timeout
        while True:
            taken = self.taken()
            if len(taken) >= n:
                return taken
            if time.monotonic() > deadline:
                statuses = [g.status for g in self.got]
                raise AssertionError(f"{len(taken)} of {n} requests taken in {timeout:g} s: "
                                     f"statuses {statuses}")  # fmt: skip
            time.sleep(0.05)
