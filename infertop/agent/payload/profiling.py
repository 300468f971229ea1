"""The agent's profiler windows: when to start one, how long it runs, and its ``window`` message."""

from __future__ import annotations

import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.constants import (
    COST_BUDGET,
    MEMORY_CALL_MAX_S,
    MEMORY_CALL_WAIT_S,
    MIN_WINDOW_S,
    PROBE_WINDOW_S,
    WINDOW_SLOWDOWN,
)
from infertop.agent.payload.kineto import _KinetoLog, kineto_events
from infertop.agent.payload.memory import _trim_heap
from infertop.agent.payload.reduce import op_thread_cpu, reduce_events
from infertop.agent.payload.stages import _unwrapped_code
from infertop.agent.payload.window import (
    _dynamo_compiled,
    _experimental_config,
    _MemoryCall,
    _torch,
    _warm_up,
    _Window,
)

# -- end --


class _ProfilingMixin:
    """Duty-cycled profiler windows while started, each reduced and sent as it ends (through
    ``_ServingMixin._send``; the agent's loop calls ``_begin_window`` / ``_end_window``)."""

    def _init_profiling(self):
        self.seq = 0
        self.window = None
        self.window_deadline = 0.0
        self.next_window = 0.0
        self.events_rate = None  # events/s seen in the last window; None before the first
        self.extra_not_before = 0.0  # no out-of-cycle window (profile_now) before this
        self.kineto_log = None
        self.kineto_ready = False
        self.experimental_config = None
        self.all_threads = False
        self.memory_next = False  # profile_memory: the next window is a memory call

    def prepare_torch(self, on_this_thread):
        """Set up profiling if torch is imported; ``on_this_thread``: also warm up here."""
        torch = _torch()
        if torch is None or self.kineto_ready:
            return
        self.kineto_log = _KinetoLog()
        self.experimental_config, self.all_threads = _experimental_config(torch)
        if on_this_thread:
            _warm_up(torch, self.kineto_log, self.experimental_config)
        self.kineto_ready = True

    def _window_length(self):
        """window_s, shortened so that the expected event count stays under 80 % of max_events;
        the first window is a short probe of the event rate."""
        wanted = self.config["window_s"]
        if self.events_rate is None:
            return min(wanted, PROBE_WINDOW_S)
        if self.events_rate <= 0:
            return wanted
        return min(wanted, max(MIN_WINDOW_S, 0.8 * self.config["max_events"] / self.events_rate))

    def _begin_window(self):
        period = self.config["period_s"]
        now = time.monotonic()
        self.next_window = now + period
        torch = _torch()
        if torch is None:
            self._status_once(
                "no-torch", "no-profiler", "torch is not imported in the target: no profiler windows"
            )
            return
        if not self.kineto_ready:
            self.prepare_torch(on_this_thread=False)
        try:
            if torch.autograd.profiler._is_profiler_enabled or torch._C._autograd._profiler_enabled():
                self._status_once(
                    "busy", "profiler-busy", "the target is running its own torch.profiler; windows skipped"
                )
                return
        except Exception:
            pass
        if not self.all_threads:
            self._status_once(
                "threads",
                "partial",
                "this torch cannot profile other threads from the agent's thread",
            )
        first_init = self.kineto_log is None or not self.kineto_log.initialised()
        # profile_memory: every other window is one model call profiled on its own thread
        # (_MemoryCall), the first after a window over all threads has set libkineto up
        memory_call = bool(self.config.get("profile_memory")) and self.memory_next and self.seq > 0
        self.memory_next = not memory_call
        if memory_call and _dynamo_compiled():
            self._status_once(
                "memory-compiled", "partial",
                "torch.compile is in use in the target: no memory profile (its graphs would "
                "compile again around the profiler's module hooks)",
            )  # fmt: skip
            memory_call = False
        if memory_call:
            try:
                models = getattr(self, "model_codes", ())  # the models timed (serve.py)
                window = _MemoryCall(torch, self.config, self.kineto_log, models, _unwrapped_code)
                window.start()
            except Exception as exc:  # torch < 2.0: no always_call hooks
                self._status_once("memory-call", "partial", "no memory profile in this torch: %s" % exc)
                memory_call = False
        try:
            if not memory_call:
                window = _Window(torch, self.config, self.kineto_log, self.experimental_config, first_init)
                window.start()
        except Exception as exc:
            self._status_once("start-failed", "no-profiler", "profiler window failed to start: %s" % exc)
            return
        self.window = window
        self.window_deadline = time.monotonic() + (MEMORY_CALL_WAIT_S if memory_call else self._window_length())

    def _profile_now(self):
        """A window now, out of the cycle (``watch``'s incidents): (started, why not). Never
        while one is open or before ``start``; sooner after the last window than its cost
        allows (``COST_BUDGET``), the next window is brought forward to that moment instead.
        The cycle goes on from it (``_begin_window``)."""
        if not self.started:
            return False, "not started"
        if self.window is not None:
            return False, "a window is open"
        wait = self.extra_not_before - time.monotonic()
        if wait > 0:
            self.next_window = min(self.next_window, self.extra_not_before)
            return False, "the last window's cost: the next one starts in %.1f s" % wait
        self.memory_next = False  # a window over all threads, not one model call
        self._begin_window()
        if self.window is None:
            return False, "no profiler window could start"
        return True, None

    def _end_window(self, send, full=False):
        window, self.window = self.window, None
        if window is None:
            return
        memory_call = isinstance(window, _MemoryCall)
        if memory_call and send and window.pending() and time.monotonic() - window.started_mono < MEMORY_CALL_MAX_S:
            self.window = window  # the call it profiles has not ended: look again soon
            self.window_deadline = time.monotonic() + 0.1
            return
        t_end = time.time()
        t_start = window.t_start
        work_start = time.monotonic()
        try:
            raw = window.stop()
        except Exception as exc:
            self._send({"type": "status", "state": "window-failed", "message": "profiler stop failed: %s" % exc})
            return
        stopped_ns = time.time_ns()
        if memory_call:
            if not raw:
                if send and window.state != "failed":
                    self._status_once(
                        "no-memory-call", "partial",
                        "no nn.Module call began in %.0f s: no memory profile" % MEMORY_CALL_WAIT_S,
                    )  # fmt: skip
                return
            t_start, t_end, stopped_ns = window.t_start, window.t_end, window.stopped_ns
        if not send:
            del raw
            _trim_heap()
            return
        max_events = self.config["max_events"]
        n = len(raw)
        truncated = n > max_events
        try:
            if truncated:
                # events come sorted by start time: keep the first max_events, i.e. every
                # thread's activity up to a cut-off time, and say the window ends there
                t_end = raw[max_events].start_ns() / 1e9
            elif n:
                # events recorded while the profiler was being stopped belong to the window
                last = max(min(e.start_ns() + e.duration_ns(), stopped_ns) for e in raw[-64:]) / 1e9
                if last > t_end:
                    t_end = last
        except Exception:
            pass
        try:
            events = kineto_events(raw, max_events, window.record_shapes, end_ns=stopped_ns)
            del raw
            body = reduce_events(
                events, t_start, t_end, device_profiled=window.use_cuda, memory=window.profile_memory
            )
            op_thread_cpu(body["op_time"], window.cpu_start, window.cpu_end)
        except Exception as exc:
            self._send({"type": "status", "state": "window-failed", "message": "cannot read profile: %s" % exc})
            return
        del events
        _trim_heap()
        recorded = max(work_start - window.started_mono, 1e-3)
        if memory_call:  # the call's time under the profiler; its start and stop on its thread
            recorded = max(t_end - t_start, 1e-3) + window.target_s / WINDOW_SLOWDOWN
        elif full or truncated:
            # the next window's length follows from this rate (see _window_length); rates
            # fluctuate, so a lower one only halves the estimate
            rate = n / recorded
            if self.events_rate is None or rate > 0.5 * self.events_rate:
                self.events_rate = rate
            else:
                self.events_rate *= 0.5
        # what this window cost the target; stretch the period to keep within COST_BUDGET
        cost = WINDOW_SLOWDOWN * recorded + (time.monotonic() - work_start - window.grace_s)
        period = self.config["period_s"]
        wait = max(period, cost / COST_BUDGET)
        self.next_window = max(self.next_window, window.started_mono + wait)
        # an out-of-cycle window keeps to the same budget (the period aside)
        self.extra_not_before = window.started_mono + cost / COST_BUDGET
        if wait > period * 1.05:
            self._status_once(
                "backoff",
                "backoff",
                "windows cost the target ~%.0f ms each (%d events): one every %.0f s instead of %.0f s"
                % (cost * 1000, n, wait, period),
            )
        self.seq += 1
        msg = {
            "type": "window",
            "seq": self.seq,
            "t_start": t_start,
            "t_end": t_end,
            "events": n,
            "truncated": truncated,
            "cost_s": round(cost, 4),
        }
        msg.update(body)
        if memory_call and msg.get("memory") is not None:
            msg["memory"]["rows"] = window.rows
        if truncated:
            self._send(
                {
                    "type": "status",
                    "state": "window-truncated",
                    "message": "window %d: read the first %d of %d events; next windows are shorter (%.2f s)"
                    % (self.seq, max_events, n, self._window_length()),
                }
            )
        self._send(msg)
