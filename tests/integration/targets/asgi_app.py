"""A real Starlette app served by uvicorn, for the request-latency test (Python >= 3.12 with
starlette and uvicorn installed; not a test itself).

``POST /embed``: tokenizes the body in pure Python (``encode``), then awaits a short sleep (the
"model", off the loop), and answers JSON; one request in ``--rare-every`` also takes
``slow_lookup`` (~30 ms, inline: it blocks the loop). Writes ``--status`` (the port and the
requests served) every 0.2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import uvicorn
from serving_status import write_status_forever
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

STATE = {"served": 0, "rare_every": 40}


def encode(text: str) -> list[int]:
    return [hash(w) % 30000 for w in text.split() for _ in range(20)]


def slow_lookup(ids: list[int]) -> int:
    end = time.perf_counter() + 0.03
    n = 0
    while time.perf_counter() < end:
        n += sum(ids[:50])
    return n


async def embed(request: Request) -> JSONResponse:
    body = (await request.body()).decode()
    ids = encode(body)
    STATE["served"] += 1
    if STATE["served"] % STATE["rare_every"] == 0:
        slow_lookup(ids)
    await asyncio.sleep(0.003)
    return JSONResponse({"n": len(ids), "v": sum(ids[:8])})


app = Starlette(routes=[Route("/embed", embed, methods=["POST"])])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--status", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rare-every", type=int, default=40)
    args = ap.parse_args()
    STATE["rare_every"] = args.rare_every
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="error", access_log=False)
    server = uvicorn.Server(config)

    write_status_forever(server, args.status, lambda: {"served": STATE["served"]})
    server.run()


if __name__ == "__main__":
    main()
