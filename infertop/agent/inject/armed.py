"""An agent already in the target (armed at start-up, or a previous injection still waiting):
used as it is, and never a second one injected beside a live socket."""

from __future__ import annotations

import os
import time

from infertop.agent import protocol
from infertop.agent.inject.result import BUSY, InjectResult, fail


def probe_agent(path: str, timeout: float = 1.0) -> dict | None:
    """The hello of an agent listening at ``path`` (or its error reply when it is busy with
    another client); ``{"type": "silent"}`` when something listens there but gave no usable
    answer in time; None when nothing listens (no socket, or a stale one).

    Saying hello is harmless: only a client that configured or started something ends an
    injected agent's session by leaving.
    """
    try:
        sock = protocol.connect(path, timeout=timeout)
    except OSError:
        return None
    try:
        try:
            protocol.send_msg(sock, {"cmd": "hello", "client": "infertop-inject"})
        except protocol.ProtocolError:
            pass  # a busy agent answers and closes at once, maybe before our hello: read it
        reply = protocol.recv_msg(sock)
        return reply if reply.get("type") in ("hello", "error") else {"type": "silent"}
    except protocol.ProtocolError:
        # a live listener that said nothing usable (busy stopping a window, closing on us, a
        # slow start): an agent is there, so never inject a second one beside it
        return {"type": "silent"}
    finally:
        sock.close()


def use_existing(pid: int, path: str, timeout: float, t0: float) -> InjectResult | None:
    """The result when an agent listens at ``path`` already (ok, or ``busy``); None when none
    does and one is to be injected. A silent agent gets a second, longer chance (up to
    ``timeout``, at most 10 s) to answer."""
    if not os.path.exists(path):
        return None
    hello = probe_agent(path)
    if hello is not None and hello.get("type") == "silent":
        hello = probe_agent(path, timeout=max(1.0, min(timeout, 10.0)))
    if hello is not None and hello.get("type") == "silent":
        return fail(
            BUSY,
            f"pid {pid} already has an agent, which did not answer in time (busy with a "
            "profiler window?); try again in a few seconds",
            t0,
        )
    if hello is not None and hello.get("type") == "error":
        return fail(
            BUSY,
            f"pid {pid} already has an agent serving another client (another infertop is "
            f"attached): {hello.get('message')}",
            t0,
        )
    if hello is not None and hello.get("pid") is not None:
        return InjectResult(
            True,
            socket_path=path,
            method="armed" if hello.get("armed") else "existing",
            python=hello.get("python"),
            elapsed_s=time.monotonic() - t0,
        )
    return None
