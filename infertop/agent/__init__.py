"""The in-process agent: ``arm()`` it in your own process, or inject it into another one
(``infertop.agent.inject.inject(pid)``).

The agent itself is the ``payload`` package (its modules joined into one source text and run
inside the target); ``protocol.py`` is the wire format both sides share; the ``inject`` package
gets the payload into a running process. Importing this package is cheap: it imports neither
torch nor the injector.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["arm", "arm_from_env", "armed_agent", "payload_source"]

ENV_VAR = "INFERTOP_AGENT"
REGISTRY_KEY = "_infertop_agent"


def armed_agent() -> Any | None:
    """The agent running in this process (armed or injected), or None."""
    mod = sys.modules.get(REGISTRY_KEY)
    agent = getattr(mod, "agent", None) if mod is not None else None
    if agent is not None and agent.alive():
        return agent
    return None


def arm() -> str:
    """Start the agent in this process in "armed" mode; returns its socket path.

    Call it from the main thread (the one that imported torch, if torch is imported yet): the
    profiler warm-up runs on the calling thread. The agent keeps listening for clients until the
    process exits; calling ``arm()`` again is a no-op. If torch is not imported yet, profiler
    windows start once it is (nothing imports torch on the agent's behalf).
    """
    existing = armed_agent()
    if existing is not None:
        return str(existing.path)
    from infertop.agent.payload import payload_source

    namespace: dict[str, Any] = {"__name__": REGISTRY_KEY}
    code = compile(payload_source(mode="armed"), "<infertop-agent>", "exec")
    exec(code, namespace)
    agent = armed_agent()
    if agent is None:  # pragma: no cover - the payload raises in armed mode instead
        raise RuntimeError("the infertop agent did not start")
    return str(agent.path)


def arm_from_env() -> str | None:
    """``arm()`` when ``INFERTOP_AGENT=1`` is set; never raises (start-up must not break)."""
    if os.environ.get(ENV_VAR, "") not in ("1", "true", "yes", "on"):
        return None
    try:
        return arm()
    except Exception:
        return None


def payload_source(**kwargs: Any) -> str:
    from infertop.agent.payload import payload_source as _source

    return _source(**kwargs)
