"""Generation calls followed by the agent's timer in this process (real torch and
transformers): ``sys.monitoring`` on Python >= 3.12, the functions wrapped in place before it
(``wrappers.py``). Prints one JSON object, each scenario's rows and spans, for
tests/agent/test_generation_monitor.py.

Scenarios: a Hugging Face ``generate`` with its own first-token time (a streamer); a beam
search; a hand-written loop named by a pattern; a ``generate`` already running when the
monitor starts; one that raises.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from infertop.agent.payload.generation import _Generations, find_generation_codes  # noqa: E402
from infertop.agent.payload.monitor import _Monitor  # noqa: E402
from infertop.agent.payload.stages import (  # noqa: E402
    find_known_codes,
    find_model_codes,
    parse_stage_patterns,
)
from infertop.agent.payload.wrappers import _Wrappers  # noqa: E402

#: the agent's timer on this Python
TIMER = _Monitor if _Monitor.available() else _Wrappers

hf_logging.set_verbosity_error()
torch.manual_seed(0)
LAYERS, EMBD = 2, 32


def _runqueue_wait_ns() -> int:
    """How long this thread has waited for a CPU, by the kernel's accounting."""
    with open("/proc/thread-self/schedstat") as fh:
        return int(fh.read().split()[1])


class FirstToken(BaseStreamer):
    def __init__(self) -> None:
        self.puts, self.first = 0, 0

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first = time.perf_counter_ns()

    def end(self) -> None:
        pass


class Tiny(torch.nn.Module):
    """A hand-written decoder's stand-in: a model with sub-modules, called once per token."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 64), torch.nn.ReLU(), torch.nn.Linear(64, 6))

    def forward(self, x):
        for _ in range(20):
            x = torch.tanh(self.body(x))
        return x


def my_generate(model, x, n):
    out = []
    for _ in range(n):
        x = model(x)
        out.append(x)
    return out


def encode(text, fail=False, nest=False):
    """A plain stage function: one that raises, and one whose nested call of itself raises."""
    if nest:
        try:
            encode(text, fail=True)
        except ValueError:
            pass
    if fail:
        raise ValueError("bad input")
    return len(text)


def plain_calls_that_raise():
    """Stage calls timed with no PY_UNWIND event: a call that raised leaves no span and does not
    swallow the next; a nested call that raised does not end its outer one."""
    spans = []
    mon = TIMER({encode.__code__: "preprocess"}, lambda *a: spans.append(list(a[1:4])))
    mon.install()
    unwind = TIMER is _Monitor and sys.monitoring.get_events(mon.tool) & sys.monitoring.events.PY_UNWIND
    try:
        encode("a", fail=True)
    except ValueError:
        pass
    t0 = time.perf_counter_ns()
    encode("b", nest=True)
    t1 = time.perf_counter_ns()
    encode("c")
    mon.uninstall()
    return {"spans": spans, "outer": [t0, t1], "unwind_events": bool(unwind)}


async def app(scope, receive, send):
    """An ASGI app's entry point, timed with a filter (the agent's ``asgi_http``)."""
    if scope.get("fail"):
        raise RuntimeError("the handler failed")


def unwinding_once_served():
    """PY_UNWIND, which cannot be local, stays off while a filtered entry point is only loaded
    (an inference worker that imports the ASGI framework and serves nothing); its first call
    turns it on, and a request that raises is still timed."""
    import asyncio

    spans = []
    mon = TIMER({app.__code__: "request"}, lambda *a: spans.append(a[1]),
                filters={app.__code__: lambda frame: "GET /"})  # fmt: skip
    mon.install()
    monitoring = getattr(sys, "monitoring", None) if TIMER is _Monitor else None
    before = monitoring is not None and bool(monitoring.get_events(mon.tool) & monitoring.events.PY_UNWIND)
    asyncio.run(app({"type": "http"}, None, None))
    try:
        asyncio.run(app({"type": "http", "fail": True}, None, None))
    except RuntimeError:
        pass
    after = monitoring is None or bool(monitoring.get_events(mon.tool) & monitoring.events.PY_UNWIND)
    mon.uninstall()
    return {"before": before, "after": after, "spans": spans}


async def entrypoint(scope, receive, send):
    """A serving framework's HTTP entry point that hands the request to the user's ASGI app
    (Ray Serve's replica calling a FastAPI ingress), both timed as requests."""
    await asyncio.sleep(0)
    await app(scope, receive, send)


def nested_requests():
    """An ASGI app's call inside an outer timed request is that request, not a second one;
    requests side by side on the loop are each their own."""
    spans = []
    http = lambda frame: "GET /" if frame.f_locals["scope"].get("type") == "http" else None  # noqa: E731
    codes = {app.__code__: "request", entrypoint.__code__: "request"}
    mon = TIMER(codes, lambda *a: spans.append([a[1], a[4]]),
                filters={c: http for c in codes})  # fmt: skip

    async def three():
        await asyncio.gather(*(entrypoint({"type": "http"}, None, None) for _ in range(3)))
        await app({"type": "http"}, None, None)  # the app alone: a request of its own

    mon.install()
    asyncio.run(three())
    mon.uninstall()
    return spans


def batch_loop(stop):
    """A worker's loop: a batch collected (a timed call), then handled, until ``stop``."""
    while not stop.is_set():
        predict(["a", "b"])
        time.sleep(0.001)


def install_reads_only_its_own_stack():
    """Installing reads no other thread's frames (on CPython 3.12.1 that walk, at every attach,
    corrupted a LitServe worker); a thread's calls running at install are found on its own
    stack, at its next timed call."""
    stop = threading.Event()
    t = threading.Thread(target=batch_loop, args=(stop,))
    t.start()
    spans, walked = [], []
    real = sys._current_frames

    def counting():
        walked.append(1)
        return real()

    sys._current_frames = counting
    try:
        mon = TIMER({predict.__code__: "forward"}, lambda *a: spans.append(a[0]))
        mon.install()
    finally:
        sys._current_frames = real
    deadline = time.monotonic() + 30
    while not spans and time.monotonic() < deadline:
        time.sleep(0.005)
    stop.set()
    t.join(30)
    mon.uninstall()
    return {"walks": len(walked), "timed_on": sorted(set(spans)), "native": t.native_id}


def predict(batch):
    """A serving framework's handler: its batch is a list of requests."""
    return [len(x) for x in batch]


def batched_forwards(tiny):
    """Forward calls' batch sizes: a model's first tensor argument, a handler's list."""
    spans = []
    mon = TIMER(
        {_unwrapped(type(tiny).forward): "forward", predict.__code__: "forward"},
        lambda *a: spans.append([a[1], a[5] if len(a) > 5 else None]),
    )
    mon.install()
    with torch.inference_mode():
        tiny(torch.randn(2, 6))
        tiny(torch.randn(5, 6))
    predict(["a", "b", "c"])
    mon.uninstall()
    return spans


def _unwrapped(fn):
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn.__code__


def monitor(patterns=()):
    models = find_model_codes()
    gen = _Generations(find_generation_codes(parse_stage_patterns([["decode", p] for p in patterns]), models))
    codes = {c: s for c, (s, _f) in find_known_codes(models).items()}
    for code, kind in gen.codes.items():
        if kind == "call":
            codes.setdefault(code, "forward")
    spans = []
    mon = TIMER(codes, lambda *a: spans.append(list(a[1:4])), generations=gen)
    mon.install()
    return mon, gen, spans


def finish(mon, gen, spans):
    mon.uninstall()
    rows = gen.take(0)  # ns
    return {"rows": rows, "spans": spans}


def main() -> None:
    cfg = GPT2Config(vocab_size=50, n_positions=64, n_embd=EMBD, n_layer=LAYERS, n_head=2,
                     bos_token_id=1, eos_token_id=1, pad_token_id=0)  # fmt: skip
    model = GPT2LMHeadModel(cfg).eval()
    tiny = Tiny()
    out = {}
    ids = torch.randint(2, 50, (3, 7))
    kw = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0)

    model.generate(ids, **kw)  # warm
    mon, gen, spans = monitor()
    streamer = FirstToken()
    waited = _runqueue_wait_ns()
    start = time.perf_counter_ns()
    model.generate(ids, attention_mask=torch.ones_like(ids), streamer=streamer, **kw)
    end = time.perf_counter_ns()
    waited = _runqueue_wait_ns() - waited
    out["hf"] = {**finish(mon, gen, spans), "own": [start, streamer.first, end], "waited": waited}

    mon, gen, spans = monitor()
    model.generate(ids[:2], attention_mask=torch.ones_like(ids[:2]), num_beams=2, **kw)
    out["beam"] = finish(mon, gen, spans)

    x = torch.randn(2, 6)
    mon, gen, spans = monitor(["*generation_scenarios.py:my_generate"])
    my_generate(tiny, x, 4)
    out["loop"] = finish(mon, gen, spans)

    long_kw = dict(kw, max_new_tokens=40, min_new_tokens=40)
    started = threading.Event()

    class Go(BaseStreamer):
        def put(self, value):
            started.set()

        def end(self):
            pass

    t = threading.Thread(target=model.generate, args=(ids,), kwargs=dict(long_kw, streamer=Go()))
    t.start()
    started.wait(30)
    mon, gen, spans = monitor()
    # the running thread is known by its native id from its next event on (the next forward
    # of the generation: the call sampler samples it from then on), found on its own stack
    deadline = time.monotonic() + 30
    while mon.natives.get(t.ident) != t.native_id and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    native_known = mon.natives.get(t.ident) == t.native_id
    t.join(60)
    done_before = list(gen.done)
    model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    out["adopted"] = {**finish(mon, gen, spans), "rows_of_the_running_one": len(done_before),
                      "native_known": native_known}  # fmt: skip

    mon, gen, spans = monitor()
    try:
        model.generate(ids, max_new_tokens=-3)
    except Exception as exc:  # noqa: BLE001
        out["raised"] = type(exc).__name__
    model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    out["after_error"] = finish(mon, gen, spans)
    out["kv_expected"] = LAYERS * 2 * 3 * (7 + 5 - 1) * EMBD * 4
    out["plain"] = plain_calls_that_raise()
    out["unwinding"] = unwinding_once_served()
    out["own_stack"] = install_reads_only_its_own_stack()
    out["batched"] = batched_forwards(tiny)
    out["nested_requests"] = nested_requests()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
