"""The agent's stage spans: the ``infertop.stage`` sink and the ``sys.monitoring`` timings,
buffered and sent as ``spans`` messages."""

from __future__ import annotations

import collections
import sys
import threading
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.constants import MAX_SPANS_BUFFERED
from infertop.agent.payload.engine_stats import ENGINE_STATS, take_engine_stats
from infertop.agent.payload.generation import _Generations
from infertop.agent.payload.monitor import _Monitor
from infertop.agent.payload.stages import ENGINE_REQUESTS
from infertop.agent.payload.wrappers import _Wrappers

# -- end --


class _SpansMixin:
    """Spans from ``infertop.annotate`` (when the target imported it) and from the monitor,
    sent through ``_ServingMixin._send`` by ``_flush_spans``."""

    def _init_spans(self):
        self.spans = collections.deque(maxlen=MAX_SPANS_BUFFERED)
        self.next_span_flush = 0.0
        self.sink_module = None
        self.monitor = None
        self.stage_codes = {}
        self.stage_filters = {}
        self.stage_returns = {}
        self.stage_bodies = set()  # codes whose calls end when their response body is closed
        self.body_timer = None  # their wrappers beside the sys.monitoring monitor (3.12+)
        self.generation_codes = {}
        self.generations = None

    def _span_sink(self, thread_id, name, start_ns, end_ns, request=None):
        native = threading.get_native_id()
        spans, inner = self.spans, []
        # a call of this stage timed inside this span on its thread (``json.dumps`` in a ``with
        # infertop.stage("serialize")``) is part of it, as a nested call of a stage's own is
        # (stages.py): taken back, unless already sent; the buffer is in order of ends
        while spans and spans[-1][3] >= start_ns:
            last = spans.pop()
            if not (last[0] == native and last[1] == name and last[2] >= start_ns):
                inner.append(last)
        spans.extend(reversed(inner))
        spans.append((native, name, start_ns, end_ns, request, None))
        self._note_span_thread(thread_id, native)

    def _flush_engine_requests(self, offset):
        """vLLM's finished requests (``stages.ENGINE_REQUESTS``): each as its parts' spans
        under its own id -- ``preprocess`` (arrival to queued in the engine core: parsing,
        tokenizing, the hop), ``queue``, ``prefill``, ``decode``, ``postprocess`` (the last
        token to the read: detokenizing, streaming) -- and as one generation call: its first
        token at vLLM's own first-token latency, its decode time, its tokens."""
        calls = []
        while ENGINE_REQUESTS and len(calls) < 20000:
            tid, now, arrival, queued, sched, first, last, ttft, prompt, new, rid = ENGINE_REQUESTS.popleft()
            t_arr, t_now = int(arrival * 1e9) - offset, int(now * 1e9) - offset
            m = [int(x * 1e9) if x > 0 else 0 for x in (queued, sched, first, last)]
            parts = (("preprocess", t_arr, m[0]), ("queue", m[0], m[1]), ("prefill", m[1], m[2]),
                     ("decode", m[2], m[3]), ("postprocess", m[3], t_now))  # fmt: skip
            for stage, a, b in parts:
                if a > 0 and b >= a and b - a < 3600 * 10**9 and len(self.spans) < MAX_SPANS_BUFFERED:
                    self.spans.append((tid, stage, a, b, rid, None))
            if ttft > 0 and new > 0 and arrival > 0:
                t_first = t_arr + int(ttft * 1e9)
                t_end = t_first + (m[3] - m[2] if m[3] >= m[2] > 0 else 0)
                calls.append([tid, (t_arr + offset) / 1e9, (t_first + offset) / 1e9,
                              (t_end + offset) / 1e9, 1, prompt, new, -1, "", new])  # fmt: skip
        if calls:
            self._send({"type": "generations", "calls": calls})

    def _push_span(self, tid, stage, start_ns, end_ns, request=None, batch=None):
        self.spans.append((tid, stage, start_ns, end_ns, request, batch))

    def _install_sink(self):
        if self.sink_module is not None:
            return
        mod = sys.modules.get("infertop.annotate")
        setter = getattr(mod, "set_span_sink", None) if mod is not None else None
        if setter is None:
            return
        try:
            setter(self._span_sink)
            self.sink_module = mod
        except Exception:
            pass

    def _remove_sink(self):
        mod, self.sink_module = self.sink_module, None
        if mod is None:
            return
        try:
            if getattr(mod, "_sink", None) == self._span_sink:
                mod.set_span_sink(None)
        except Exception:
            pass

    def _start_monitor(self):
        if not self.stage_codes:
            return
        own = self.thread.ident if self.thread is not None else None
        gens = _Generations(self.generation_codes) if self.generation_codes else None
        # sys.monitoring where it exists (3.12+); before it, the functions wrapped in place
        timer = _Monitor if _Monitor.available() else _Wrappers
        bodies = self.stage_bodies
        codes = self.stage_codes
        if timer is _Monitor and bodies:
            # a WSGI request ends when the server closes its body, not at a return: wrapped on
            # every Python, beside the monitor of the rest
            codes = {c: s for c, s in codes.items() if c not in bodies}
            side = _Wrappers(
                {c: s for c, s in self.stage_codes.items() if c in bodies}, self._push_span,
                self.stage_filters, ignore=(own,), bodies=bodies,
            )  # fmt: skip
            try:
                side.install()
                self.body_timer = side
                self._say_unreached(side)
            except Exception:
                side.uninstall()
        monitor = timer(
            codes, self._push_span, self.stage_filters, ignore=(own,), generations=gens,
            returns=self.stage_returns, **({"bodies": bodies} if timer is _Wrappers else {}),
        )
        try:
            monitor.install()
        except Exception as exc:
            try:
                monitor.uninstall()
            except Exception:
                pass
            self._status_once("monitoring", "off", "cannot time stage functions: %s" % exc)
            return
        self.monitor = monitor
        self.generations = gens
        if timer is _Wrappers:
            self._say_unreached(monitor)

    def _say_unreached(self, wrappers):
        """Once a session: the timed functions the wrappers could not reach (a function defined
        inside another one, a generator, a model under ``torch.compile``, an entry the target's
        types refuse), by name: the report's notes keep it."""
        # each name with the stage it times, in brackets: the UI says which stage went untimed
        names = sorted({"%s:%s [%s]" % (c.co_filename.rsplit("/", 1)[-1], c.co_name, wrappers.stage_of(c))
                        for c in wrappers.unreached})  # fmt: skip
        codes = wrappers.failed_codes
        names += sorted({"%s [%s]" % (n, wrappers.stage_of(codes[n])) if n in codes else n
                         for n, _ in wrappers.failed})  # fmt: skip
        if names:
            self._status_once(
                "unreached", "running",
                "Python %d.%d: %d timed functions not reached (defined inside another function, "
                "a generator, or a model under torch.compile: their calls go untimed, their "
                "samples still count): %s" % (sys.version_info[0], sys.version_info[1], len(names),
                                               ", ".join(names[:8])),
            )  # fmt: skip

    def _stop_monitor(self):
        monitor, self.monitor = self.monitor, None
        side, self.body_timer = self.body_timer, None
        self.generations = None
        for timer in (monitor, side):
            if timer is not None:
                try:
                    timer.uninstall()
                except Exception:
                    pass

    def _stop_collection(self):
        self._remove_sink()
        self._stop_monitor()
        self.spans.clear()
        ENGINE_REQUESTS.clear()
        take_engine_stats(last=True)
        self._stop_pauses()
        self._stop_call_samples()

    def _flush_spans(self):
        """Spans, and the pauses and call samples taken since the last flush."""
        if self.sink_module is None:
            self._install_sink()  # infertop.annotate may have been imported since
        offset = time.time_ns() - time.perf_counter_ns()
        self._flush_pauses(offset)
        self._flush_call_samples(offset)
        gens = self.generations
        if gens is not None and gens.done:
            self._send({"type": "generations", "calls": gens.take(offset)})
        if ENGINE_REQUESTS:
            self._flush_engine_requests(offset)
        if ENGINE_STATS:  # vLLM's scheduler, summed since the last flush (stages._vllm_stats)
            self._send({"type": "engine", "stats": take_engine_stats()})
        if not self.spans:
            return
        batch = []
        popleft = self.spans.popleft
        while len(batch) < 20000:
            try:
                tid, stage, start, end, request, size = popleft()
            except IndexError:
                break
            row = [tid, stage, (start + offset) / 1e9, (end + offset) / 1e9]
            if size is not None:
                row += [request, size]
            elif request is not None:
                row.append(request)
            batch.append(row)
        if batch:
            self._send({"type": "spans", "spans": batch})
