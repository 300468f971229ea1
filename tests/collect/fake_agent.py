"""A tiny in-test agent: a Unix socket server that speaks docs/agent-protocol.md.

The real agent is written in parallel; this is the one test double the client tests use. It
serves one connection in a private (0700) directory, driven by a script per test.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import tempfile
import threading
from collections.abc import Callable
from typing import Any

Script = Callable[["FakeAgent", socket.socket], None]


class FakeAgent:
    """Serves one connection with ``script`` on a thread; records what the client sent."""

    def __init__(self, script: Script, mode: int = 0o700) -> None:
        self.dir = tempfile.mkdtemp(prefix="it-agent-")
        os.chmod(self.dir, mode)
        self.path = os.path.join(self.dir, "agent-4242.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        self.server.settimeout(10)
        self.received: list[dict[str, Any]] = []
        self.script = script
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        conn.settimeout(10)
        try:
            with conn:
                self.script(self, conn)
        except (OSError, EOFError):
            pass  # the client hung up: part of several scripts
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    # -- speaking the protocol --------------------------------------------------------------------
    def recv(self, conn: socket.socket) -> dict[str, Any]:
        header = self._exact(conn, 4)
        msg = json.loads(self._exact(conn, struct.unpack(">I", header)[0]))
        self.received.append(msg)
        return msg

    @staticmethod
    def _exact(conn: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    @staticmethod
    def send(conn: socket.socket, obj: dict[str, Any]) -> None:
        """Framed as the protocol frames it, but as given: a rude agent sends what the
        protocol's own encoder would refuse (no object, another version)."""
        body = json.dumps(obj).encode()
        conn.sendall(struct.pack(">I", len(body)) + body)

    def handshake(self, conn: socket.socket, torch: str | None = "2.3.1") -> None:
        """hello, configure and start answered like the real agent."""
        hello = self.recv(conn)
        assert hello["cmd"] == "hello" and hello["v"] == 1
        self.send(conn, {"v": 1, "type": "hello", "agent": "0.1.0", "pid": 7, "python": "3.11.7",
                         "torch": torch, "cuda": True, "armed": False, "monitoring": True,
                         "all_threads": True})  # fmt: skip
        cfg = self.recv(conn)
        assert cfg["cmd"] == "configure"
        effective = {k: v for k, v in cfg.items() if k not in ("v", "cmd")}
        self.send(conn, {"v": 1, "type": "ok", "cmd": "configure", "config": effective})
        assert self.recv(conn)["cmd"] == "start"
        self.send(conn, {"v": 1, "type": "ok", "cmd": "start"})

    def until_detach(self, conn: socket.socket) -> None:
        while self.recv(conn)["cmd"] != "detach":
            pass
        self.send(conn, {"v": 1, "type": "ok", "cmd": "detach"})

    @staticmethod
    def until_closed(conn: socket.socket) -> None:
        """Wait for the client to hang up (it does, once it has given up on us)."""
        while conn.recv(1 << 16):
            pass

    def close(self) -> None:
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes an accept() that nobody answered
        except OSError:
            pass
        self.server.close()
        self.thread.join(5)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.error is not None:
            raise self.error
