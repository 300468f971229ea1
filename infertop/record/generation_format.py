"""Recording events 18 and 19 (format 1.7): one generation call, timed by the agent, and a stage
span with its batch size (docs/recording-format.md, docs/generation.md).

    [18, tid, t_start, t_first, t_end, batch, prompt tokens, new tokens, kv bytes, kv device,
     forwards, pid?]

``t_first``, the counts and the cache's fields are ``None`` where the agent did not see them;
``pid`` is written only for a process other than the target (as in codes 11 and 12).
"""

from __future__ import annotations

from typing import Any

from infertop.model.events import GenerationCall, StageSpan
from infertop.model.fields import as_opt_str
from infertop.model.numbers import real, whole

GENERATION = 18
#: 1.7: a stage span with its batch size (code 7's fields, the batch before the request id):
#: ``[19, tid, stage, t_start, t_end, batch, request?]``; a 1.6 reader skips it
SPAN_BATCH = 19


def _opt_int(x: Any) -> int | None:
    return None if x is None else whole(x)


def encode_generation(ev: GenerationCall) -> list[Any]:
    out = [
        GENERATION, ev.tid, ev.t_start, ev.t_first, ev.t_end, ev.batch, ev.prompt_tokens,
        ev.new_tokens, ev.kv_bytes, ev.kv_device, ev.forwards,
    ]  # fmt: skip
    return out + [ev.pid] if ev.pid else out


def encode_span_batch(ev: StageSpan) -> list[Any]:
    out = [SPAN_BATCH, ev.tid, ev.stage, ev.t_start, ev.t_end, ev.batch]
    return out + [ev.request] if ev.request is not None else out


def decode_span_batch(f: list[Any]) -> StageSpan:
    return StageSpan(
        whole(f[0]), str(f[1]), real(f[2]), real(f[3]), None if len(f) <= 5 else as_opt_str(f[5]),
        whole(f[4]),
    )  # fmt: skip


def decode_generation(f: list[Any]) -> GenerationCall:
    t_start, t_end = real(f[1]), real(f[3])
    t_first = None if f[2] is None else real(f[2])
    if t_end < t_start or (t_first is not None and not t_start <= t_first <= t_end):
        raise ValueError("a generation call's times are out of order")
    return GenerationCall(
        whole(f[0]), t_start, t_first, t_end, _opt_int(f[4]), _opt_int(f[5]), _opt_int(f[6]),
        _opt_int(f[7]), as_opt_str(f[8]), whole(f[9]), whole(f[10]) if len(f) > 10 else 0,
    )  # fmt: skip
