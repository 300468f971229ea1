"""The agent: its thread's loop, its life cycle and its sessions; the rest is in the mixins
(``serve.py``, ``profiling.py``, ``spans.py``, ``pauses.py``, ``callsamples.py``, ``memory.py``)."""

from __future__ import annotations

import math
import os
import select
import sys
import threading
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.callsamples import _CallSamplerMixin
from infertop.agent.payload.constants import (
    ALLOCATOR_EVERY_S,
    DEFAULT_CONFIG,
    MODEL_SCAN_S,
    REGISTRY_KEY,
    SPAN_FLUSH_S,
    THREAD_NAME,
)
from infertop.agent.payload.memory import _CensusMixin, _MemoryMixin
from infertop.agent.payload.pauses import _PausesMixin
from infertop.agent.payload.profiling import _ProfilingMixin
from infertop.agent.payload.serve import _ServingMixin
from infertop.agent.payload.snapshot import _SnapshotMixin
from infertop.agent.payload.spans import _SpansMixin

# -- end --


def _registered_agent():
    mod = sys.modules.get(REGISTRY_KEY)
    agent = getattr(mod, "agent", None) if mod is not None else None
    if agent is not None and agent.alive():
        return agent
    return None


class _Agent(
    _ServingMixin, _ProfilingMixin, _SpansMixin, _PausesMixin, _CallSamplerMixin, _MemoryMixin,
    _CensusMixin, _SnapshotMixin,
):
    def __init__(self, mode, idle_exit_s=20.0):
        self.mode = mode  # "injected" or "armed"
        self.idle_exit_s = idle_exit_s
        self.exiting = False
        self.thread = None
        self.stop_requested = False
        self.started = False
        self._init_serving()
        self._init_profiling()
        self._init_spans()
        self._init_pauses()
        self._init_call_samples()
        self._init_memory()
        self._init_census()
        self._init_snapshot()
        self.clock_offset_ns = time.time_ns() - time.perf_counter_ns()
        self.lock = threading.Lock()
        self.atexit_registered = False

    # -- life cycle ---------------------------------------------------------------------------

    def alive(self):
        t = self.thread
        return t is not None and t.is_alive() and not self.stop_requested

    def start_thread(self):
        t = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self.thread = t
        self._register()
        t.start()

    def _register(self):
        import types

        mod = types.ModuleType(REGISTRY_KEY)
        mod.agent = self
        sys.modules[REGISTRY_KEY] = mod
        import atexit

        atexit.register(self._atexit)
        self.atexit_registered = True
        if self.mode == "armed" and hasattr(os, "register_at_fork"):
            # an armed agent lives as long as the process: registering once is no leak
            os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self):
        """A forked child (a DataLoader worker, a pre-fork server worker) is not armed: it drops
        its copies of the agent's sockets (the parent's socket file stays the parent's) and
        forgets the agent; inject into it to profile it."""
        self.stop_requested = True
        self.path = None
        for sock in (self.listener, self.client):
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass
        self.listener = None
        self.client = None
        self.window = None
        self._close_schedstat()
        mod = sys.modules.get(REGISTRY_KEY)
        if mod is not None and getattr(mod, "agent", None) is self:
            sys.modules.pop(REGISTRY_KEY, None)

    def _unregister(self):
        mod = sys.modules.get(REGISTRY_KEY)
        if mod is not None and getattr(mod, "agent", None) is self:
            try:
                del sys.modules[REGISTRY_KEY]
            except KeyError:
                pass
        if self.atexit_registered and not self.exiting:
            import atexit

            atexit.unregister(self._atexit)
            self.atexit_registered = False

    def _atexit(self):
        self.exiting = True
        self.stop_requested = True
        t = self.thread
        if t is not None and t is not threading.current_thread():
            t.join(2.0)

    def request_stop(self):
        self.stop_requested = True

    # -- the thread -------------------------------------------------------------------------

    def _run(self):
        errors = []
        try:
            while not self.stop_requested:
                try:
                    self._step()
                except Exception as exc:
                    # a bug of ours must not take the target down, nor leave profiling on:
                    # end this session (the client is told) and keep serving; give up if it
                    # keeps happening
                    now = time.monotonic()
                    errors[:] = [t for t in errors if now - t < 10.0] + [now]
                    self._send({"type": "status", "state": "agent-error", "message": "agent error: %r" % (exc,)})
                    self._detach()
                    if len(errors) >= 5:
                        break
                    time.sleep(0.1)
        except BaseException:
            pass
        finally:
            self._shutdown()

    def _wait_for_io(self, timeout_ms):
        """The agent thread's only wait: the fds that are ready. (A function of its own so that
        a sampler can tell the agent waiting from the agent working: infertop counts this frame
        as idle, config.WAIT_FRAMES; so it stays here, named ``_Agent._wait_for_io``.)"""
        poller = select.poll()
        poller.register(self.listener.fileno(), select.POLLIN)
        if self.client is not None:
            poller.register(self.client.fileno(), select.POLLIN)
        try:
            ready = poller.poll(timeout_ms)
        except InterruptedError:
            ready = []
        return [fd for fd, _mask in ready]

    def _step(self):
        self._note_sleep()  # first: its reads may wait for the GIL, then the timeout is right
        now = time.monotonic()
        wake = now + 0.5
        if self.window is not None:
            wake = min(wake, self.window_deadline)
        elif self.started and self.next_window:
            wake = min(wake, self.next_window)
        if self.started:
            wake = min(
                wake, self.next_span_flush, self.next_allocator, self.next_call_sample,
                self.next_model_scan, self._pauses_due(), self.next_census,
            )  # fmt: skip
        # rounded up: a timeout rounded down to 0 ms would spin until the deadline
        fds = self._wait_for_io(max(0, int(math.ceil((wake - now) * 1000))))
        self._note_wake(wake, fds)
        if self.client is not None and self.client.fileno() in fds:
            self._read_client()  # first: a client that just left makes room for the next
        if self.listener is not None and self.listener.fileno() in fds:
            self._accept()
        self._tick()

    def _tick(self):
        now = time.monotonic()
        if self.client is None and self.mode == "injected" and now - self.idle_since > self.idle_exit_s:
            self.stop_requested = True  # nobody came (or came back): remove ourselves
            return
        if self.window is not None and (now >= self.window_deadline or not self.started):
            self._end_window(send=self.started and self.client is not None, full=self.started)
        self._tick_snapshot(now)  # asked for without a session too (infertop memory-snapshot)
        if not self.started or self.client is None:
            return
        if self.window is None and now >= self.next_window:
            self._begin_window()
        self._tick_call_samples(now)
        self._tick_models(now)
        self._tick_pauses(now)
        if now >= self.next_span_flush:
            self.next_span_flush = now + SPAN_FLUSH_S
            self._flush_spans()
        if now >= self.next_allocator:
            self.next_allocator = now + ALLOCATOR_EVERY_S
            self._send_allocator()
        self._tick_census(now)

    def _shutdown(self):
        # the socket goes first: a client waiting for it to vanish need not wait for the rest
        if self.listener is not None:
            try:
                self.listener.close()
            except OSError:
                pass
            self.listener = None
        try:
            self._end_snapshots()  # before the folder goes: an uncollected file would keep it
        except BaseException:
            pass
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            try:
                os.rmdir(os.path.dirname(self.path))
            except OSError:
                pass
        for step in (self._end_window_quietly, self._stop_collection, self._close_client, self._unregister):
            try:
                step()
            except BaseException:
                pass

    def _end_window_quietly(self):
        if self.window is not None:
            self._end_window(send=False)

    # -- sessions ---------------------------------------------------------------------------

    def _detach(self):
        self.started = False
        if self.window is not None:
            self._end_window(send=False)
        self._stop_collection()
        self._close_client()
        self.config = dict(DEFAULT_CONFIG)
        self.stage_codes = {}
        self.pattern_codes = {}
        self.model_codes = []
        self.next_model_scan = float("inf")
        self.stage_filters = {}
        self.stage_returns = {}
        self.stage_bodies = set()
        self.generation_codes = {}
        self.statuses_sent = set()
        self.next_census = float("inf")
        if self.mode == "injected":
            self.stop_requested = True

    def _start(self):
        now = time.monotonic()
        first = not self.started
        self.started = True
        if first:
            self.next_window = max(now, self.next_window)  # a backed-off period still holds
            self.next_span_flush = now + SPAN_FLUSH_S
            self.next_allocator = now
            self.next_model_scan = now + MODEL_SCAN_S
            self._start_census(now)
            self.clock_offset_ns = time.time_ns() - time.perf_counter_ns()
        self._install_sink()
        if self.stage_codes and self.monitor is None:
            self._start_monitor()
        self._start_pauses()
        if first:
            self._start_call_samples()
