"""Generation calls in the Chrome export of a recording: on a ``generation`` track of the
call's thread, one ``generate`` slice per call (its batch, tokens, TTFT, TPOT and KV-cache
bytes in its args) with its ``prefill`` and ``decode`` inside (docs/export.md)."""

from __future__ import annotations

from collections.abc import Callable

from infertop.analysis.generation import tpot_ms, ttft_ms
from infertop.export.jsonout import us
from infertop.model.events import GenerationCall


def generation_slices(
    emit: Callable[[dict], None],
    pid: int,
    track: int,
    ev: GenerationCall,
    ns: Callable[[float], int],
) -> None:
    s, e = ns(ev.t_start), ns(ev.t_end)
    if e < s:
        return
    ttft, tpot = ttft_ms(ev), tpot_ms(ev)
    args = {
        "batch": ev.batch, "prompt_tokens": ev.prompt_tokens, "new_tokens": ev.new_tokens,
        "ttft_ms": None if ttft is None else round(ttft, 3),
        "tpot_ms": None if tpot is None else round(tpot, 3),
        "kv_cache_bytes": ev.kv_bytes, "kv_cache_device": ev.kv_device,
    }  # fmt: skip
    base = {"ph": "X", "pid": pid, "tid": track, "cat": "generation"}
    emit({**base, "ts": us(s), "dur": us(e - s), "name": "generate",
          "args": {k: v for k, v in args.items() if v is not None}})  # fmt: skip
    if ev.t_first is None:
        return
    f = min(max(ns(ev.t_first), s), e)
    emit({**base, "ts": us(s), "dur": us(f - s), "name": "prefill"})
    emit({**base, "ts": us(f), "dur": us(e - f), "name": "decode"})
