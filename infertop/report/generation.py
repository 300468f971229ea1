"""The report's ``generation`` record (``report/records.py``; docs/report.md,
docs/generation.md) and its lines in the text report."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from infertop.analysis.generation import GenerationSummary, Spread
from infertop.analysis.shares import Latency
from infertop.report import records
from infertop.report.pauses import latency_record


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def _opt(x: float | None) -> float | None:
    return None if x is None else _r(x)


def _lat(lat: Latency | None) -> records.Latency | None:
    return None if lat is None else latency_record(lat)


def _spread(s: Spread | None, mean: bool = False) -> records.Spread | None:
    if s is None:
        return None
    return records.Spread(_r(s.p50, 2), _r(s.max, 2), _r(s.mean, 3) if mean else UNSET)


def generation_record(g: GenerationSummary | None) -> records.Generation | None:
    if g is None:
        return None
    kv = g.kv_cache
    return records.Generation(
        calls=g.calls,
        ttft_ms=_lat(g.ttft_ms),
        tpot_ms=_lat(g.tpot_ms),
        tokens_per_s=None if g.tokens_per_s is None else _r(g.tokens_per_s, 2),
        new_tokens=_spread(g.new_tokens),
        prompt_tokens=_spread(g.prompt_tokens),
        batch_size=_spread(g.batch_size, mean=True),
        kv_cache=None
        if kv is None
        else records.KvCache(
            bytes_p50=kv.bytes_p50,
            bytes_max=kv.bytes_max,
            bytes_per_token=None if kv.bytes_per_token is None else _r(kv.bytes_per_token, 1),
            device=kv.device,
            headroom_bytes=kv.headroom_bytes,
        ),
        latency_ms=_lat(g.latency_ms),
        by_batch=[
            records.GenerationBatch(b.batch, b.calls, _r(b.latency_ms_p50), _opt(b.ttft_ms_p50),
                                    _opt(b.tpot_ms_p50))
            for b in g.by_batch
        ],  # fmt: skip
        slowest=[
            records.SlowGeneration(
                t=_r(c.t, 6),
                duration_ms=_r(c.duration_ms),
                queue_ms=_opt(c.queue_ms),
                prefill_ms=_opt(c.prefill_ms),
                decode_ms=_opt(c.decode_ms),
                batch=c.batch,
                prompt_tokens=c.prompt_tokens,
                new_tokens=c.new_tokens,
                why=c.why or None,
            )
            for c in g.slowest
        ],
    )


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def generation_lines(rep: dict[str, Any]) -> list[str]:
    """The text report's lines (from the report's JSON): TTFT, TPOT and tokens; batch sizes with
    their latency; the cache; the slowest calls and what made them slow."""
    g = rep.get("generation")
    if not g:
        return []
    head = f"generation: {g['calls']} calls"
    if (t := g.get("ttft_ms")) is not None:
        head += f", TTFT p50 {t['p50']:.1f} p95 {t['p95']:.1f} p99 {t['p99']:.1f} ms"
    if (t := g.get("tpot_ms")) is not None:
        head += f", TPOT p50 {t['p50']:.2f} p99 {t['p99']:.2f} ms"
    if g.get("tokens_per_s") is not None:
        head += f", {g['tokens_per_s']:.0f} tokens/s"
    lines = [head]
    prompt, new = g.get("prompt_tokens"), g.get("new_tokens")
    if prompt and new:
        lines.append(
            f"  tokens per call: prompt p50 {prompt['p50']:.0f} max {prompt['max']:.0f},"
            f" new p50 {new['p50']:.0f} max {new['max']:.0f}"
        )
    if g.get("by_batch"):
        cells = "  ".join(
            f"{b['batch']}: {b['calls']} × {b['latency_ms_p50']:.1f} ms" for b in g["by_batch"]
        )
        lines.append(f"  by batch size (calls × p50 latency): {cells}")
    kv = g.get("kv_cache")
    if kv:
        line = (
            f"  KV cache ({kv['device']}): p50 {mib(kv['bytes_p50'])}, max {mib(kv['bytes_max'])}"
        )
        if kv.get("bytes_per_token") is not None:
            line += f", {mib(kv['bytes_per_token'])} per token of a sequence"
        if kv.get("headroom_bytes") is not None:
            line += f"; {mib(kv['headroom_bytes'])} of device memory left"
        lines.append(line)
    for c in g.get("slowest", [])[:3]:
        parts = [
            f"{k} {c[k + '_ms']:.1f}"
            for k in ("queue", "prefill", "decode")
            if c.get(k + "_ms") is not None
        ]
        why = f" — mostly {c['why']}" if c.get("why") else ""
        shape = f"batch {c['batch']}, prompt {c['prompt_tokens']}, new {c['new_tokens']}"
        lines.append(f"  slow call {c['duration_ms']:.1f} ms ({', '.join(parts)} ms; {shape}){why}")
    return lines + [""]
