"""What following generation calls costs the target (not collected by pytest): Hugging Face
``generate`` on the text-generation sample's random-weight GPT-2, in one Python 3.12 process
pinned to one core, timed by CPU time (``time.thread_time``: this thread's, which is where every
callback runs) per call, in phases that rotate each round:

- ``none``        no monitor (twice: ``none`` and ``none again``; their ratio is the noise floor);
- ``forward``     the monitor as before generation calls were followed: ``generate`` and the
                  model's forward timed as forward stage calls, nothing else;
- ``generation``  the defaults now: the same, and the generation tracker on ``generate``,
                  ``_prefill``, the decode loop, the stopping criteria and the forwards inside.

    .venv312/bin/python benchmarks/bench_generation_cost.py [--rounds 40] [--calls 8]
        [--batch 4] [--prompt 64] [--new 16] [--d-model 128] [--layers 2]

With ``--twins [--rounds 3] [--seconds 15]`` it runs the modes instead in pairs of fresh
processes side by side, each pinned to a core of its own (swapped each round), one in the mode
and one plain twin over the same seconds, and compares their calls per CPU second: the two
share the machine's moment, so its drift cancels (``none`` beside a twin is the noise floor).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from infertop.agent.payload.generation import _Generations, find_generation_codes  # noqa: E402
from infertop.agent.payload.monitor import _Monitor  # noqa: E402
from infertop.agent.payload.stages import find_known_codes, find_model_codes  # noqa: E402
from samples.common.hf_generate import build_model  # noqa: E402


def _workload(args: argparse.Namespace):  # noqa: ANN202
    """The model (one torch thread), its input ids and mask, and generate's arguments."""
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    model = build_model(2000, args.d_model, args.layers, 4, args.prompt + args.new + 8)
    ids = torch.randint(2, 2000, (args.batch, args.prompt))
    kw = dict(max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False, pad_token_id=0)
    return model, ids, torch.ones_like(ids), kw


def worker(args: argparse.Namespace) -> None:
    """One process of a pair: pinned to ``--core``, generate for ``--seconds`` under ``--mode``,
    print the calls per CPU second of this thread (where every callback runs)."""
    os.sched_setaffinity(0, {args.core})
    model, ids, mask, kw = _workload(args)
    mon = None
    if args.mode != "none":
        models = find_model_codes()
        codes = {c: s for c, (s, _f) in find_known_codes(models).items()}
        gens = _Generations(find_generation_codes((), models)) if args.mode == "generation" else None
        mon = _Monitor(codes, lambda *a: None, generations=gens)
        mon.install()
    with torch.inference_mode():
        for _ in range(3):  # warm, and instrumented once
            model.generate(ids, attention_mask=mask, **kw)
        print("ready", flush=True)
        sys.stdin.readline()  # both of the pair start together
        calls, t0, c0 = 0, time.monotonic(), time.thread_time()
        while time.monotonic() - t0 < args.seconds:
            model.generate(ids, attention_mask=mask, **kw)
            calls += 1
    print(calls / (time.thread_time() - c0), flush=True)
    if mon is not None:
        mon.uninstall()


def twins(args: argparse.Namespace) -> None:
    """Pairs of fresh processes side by side, each on a core of its own (swapped each round):
    one in the mode under test, one plain twin, over the same seconds; the ratio of their calls
    per CPU second. ``none`` against a plain twin is the noise floor."""
    import subprocess

    cores = sorted(os.sched_getaffinity(0))[-2:]
    base = [sys.executable, __file__, "--worker", "--seconds", str(args.seconds)]
    base += ["--batch", str(args.batch), "--prompt", str(args.prompt), "--new", str(args.new),
             "--d-model", str(args.d_model), "--layers", str(args.layers)]  # fmt: skip
    ratios: dict[str, list[float]] = {m: [] for m in ("none", "forward", "generation")}
    for r in range(args.rounds):
        for mode in ratios:
            a, b = (cores[0], cores[1]) if (r + len(ratios[mode])) % 2 == 0 else (cores[1], cores[0])
            procs = [
                subprocess.Popen(base + ["--mode", m, "--core", str(c)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
                for m, c in ((mode, a), ("none", b))
            ]
            for p in procs:
                assert p.stdout.readline().strip() == "ready"
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            rates = [float(p.stdout.readline()) for p in procs]
            for p in procs:
                p.wait(60)
            ratios[mode].append(rates[0] / rates[1])
    print(f"generate: batch {args.batch}, prompt {args.prompt}, {args.new} new tokens, "
          f"{args.layers} layers x {args.d_model}; {args.rounds} rounds of {args.seconds:g} s, "
          f"each beside a plain twin on the other core")  # fmt: skip
    print(f"{'mode':<12} {'calls per CPU second, ratio to the twin (median; all)':>50}")
    for mode, v in ratios.items():
        print(f"{mode:<12} {statistics.median(v):8.4f}   " + " ".join(f"{x:.3f}" for x in v))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--twins", action="store_true", help="pairs of processes side by side (below)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="none", help=argparse.SUPPRESS)
    ap.add_argument("--core", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.twins:
        return twins(args)
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    model, ids, mask, kw = _workload(args)

    def run() -> float:
        """CPU seconds per call, after one call untimed: a monitor installed or removed makes
        the interpreter re-instrument the code it runs next, once (not the steady state)."""
        with torch.inference_mode():
            model.generate(ids, attention_mask=mask, **kw)
        t = time.thread_time()
        with torch.inference_mode():
            for _ in range(args.calls):
                model.generate(ids, attention_mask=mask, **kw)
        return (time.thread_time() - t) / args.calls

    models = find_model_codes()
    stage_codes = {c: s for c, (s, _f) in find_known_codes(models).items()}
    gen_codes = find_generation_codes((), models)

    def phase(mode: str) -> float:
        if mode.startswith("none"):
            return run()
        gens = _Generations(gen_codes) if mode == "generation" else None
        mon = _Monitor(stage_codes, lambda *a: None, generations=gens)
        mon.install()
        try:
            return run()
        finally:
            mon.uninstall()

    run()  # warm
    # each round runs every mode once, in a rotated order, and each mode is compared with the
    # round's own ``none``: the machine's drift (minutes) cancels within a round (seconds)
    modes = ["none", "none again", "forward", "generation"]
    per: dict[str, list[float]] = {m: [] for m in modes}
    ratios: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.rounds):
        order = modes[r % len(modes):] + modes[: r % len(modes)]
        got = {m: phase(m) for m in order}
        for m in modes:
            per[m].append(got[m])
            ratios[m].append(got[m] / got["none"])
    print(f"generate: batch {args.batch}, prompt {args.prompt}, {args.new} new tokens, "
          f"{args.layers} layers x {args.d_model}; {args.rounds} rounds of {args.calls} calls, one core")  # fmt: skip
    print(f"{'mode':<12} {'CPU ms per call':>16} {'vs none, same round (median)':>30}")
    for m in modes:
        print(f"{m:<12} {statistics.median(per[m]) * 1e3:16.3f} {statistics.median(ratios[m]):30.4f}")
    gen = statistics.median(g / f for g, f in zip(per["generation"], per["forward"], strict=True))
    print(f"generation vs forward, same round (median): {gen:.4f}")
    # the callbacks' own time, summed inside real calls: this VM's noise (a few % between two
    # plain phases) hides what the end-to-end ratios would show, the sum does not
    cb = {m: _callback_us(model, ids, mask, kw, stage_codes, gen_codes, m) for m in ("forward", "generation")}
    call_us = statistics.median(per["none"]) * 1e6
    for m, (us, n) in cb.items():
        print(f"{m:<12} callbacks {n:5.0f} a call, {us:8.1f} us a call: {100 * us / call_us:.3f} % of its CPU")
    extra = cb["generation"][0] - cb["forward"][0]
    print(f"the generation tracker adds {extra:.1f} us a call: {100 * extra / call_us:.3f} % of its CPU")


def _callback_us(model, ids, mask, kw, stage_codes, gen_codes, mode: str, calls: int = 20):  # noqa: ANN001
    """(us, callbacks) the monitor's callbacks take per generate call in ``mode``: each timed by
    a wrapper (whose own two clock reads, ~0.1 us, are in the sum: an upper bound)."""
    gens = _Generations(gen_codes) if mode == "generation" else None
    mon = _Monitor(stage_codes, lambda *a: None, generations=gens)
    spent = [0, 0]
    clock = time.perf_counter_ns

    def timed(fn):  # noqa: ANN001, ANN202
        def run(*a):  # noqa: ANN002, ANN202
            t = clock()
            try:
                return fn(*a)
            finally:
                spent[0] += clock() - t
                spent[1] += 1

        return run

    mon._on_start, mon._on_return, mon._on_unwind = (
        timed(mon._on_start), timed(mon._on_return), timed(mon._on_unwind)
    )  # fmt: skip
    mon.install()
    try:
        with torch.inference_mode():
            model.generate(ids, attention_mask=mask, **kw)
            spent[:] = [0, 0]
            for _ in range(calls):
                model.generate(ids, attention_mask=mask, **kw)
    finally:
        mon.uninstall()
    return spent[0] / calls / 1e3, spent[1] / calls


if __name__ == "__main__":
    main()
