"""The uvicorn targets' status file (not a test): the port the server listens on and what
the app reports, rewritten every 0.2 s from a daemon thread, atomically."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable


def write_status_forever(server: object, path: str, state: Callable[[], dict]) -> None:
    """Start the thread that writes ``{"port", "t", **state()}`` to ``path``."""

    def report() -> None:
        while True:
            time.sleep(0.2)
            port = None
            for s in getattr(server, "servers", []) or []:
                for sock in s.sockets:
                    port = sock.getsockname()[1]
            tmp = path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"port": port, "t": time.time(), **state()}, fh)
            os.replace(tmp, path)

    threading.Thread(target=report, daemon=True).start()
