"""The call sampler: the stacks of the threads inside stage calls, each with its time, so that
the host can tie stacks to calls (tail attribution: where the slow calls spent their time).

Only threads that are in a timed call (``sys.monitoring``, Python >= 3.12) or that ended an
``infertop.stage`` span in the last ``SPAN_THREAD_KEEP_S`` are looked at, on the agent's own
thread, ``call_sample_hz`` times a second: one ``sys._current_frames()`` and a walk of those
threads' frames. Code objects are held only until the next flush.
"""

from __future__ import annotations

import collections
import sys
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.constants import (
    GIL_LATE_S,
    MAX_CALL_SAMPLES_BUFFERED,
    MAX_SAMPLE_DEPTH,
    SPAN_THREAD_KEEP_S,
)

# -- end --


def stack_of(frame):
    """((code, line), ...) root first, at most MAX_SAMPLE_DEPTH innermost frames."""
    out = []
    while frame is not None and len(out) < MAX_SAMPLE_DEPTH:
        out.append((frame.f_code, frame.f_lineno or 0))
        frame = frame.f_back
    out.reverse()
    return tuple(out)


def sample_message(samples, offset_ns, rate_hz, gil_waits=()):
    """One ``samples`` message for buffered (native tid, perf ns, stack) samples: its own frame
    and stack tables (so each message stands alone), ids local to the message; and the
    (start ns, end ns) the agent's thread waited past its wake-up."""
    frame_ids, frames = {}, []
    stack_ids, stacks = {}, []
    rows = []
    for tid, t_ns, stack in samples:
        sid = stack_ids.get(stack)
        if sid is None:
            flat = []
            for code, line in stack:
                fid = frame_ids.get(code)
                if fid is None:
                    fid = frame_ids[code] = len(frames)
                    name = getattr(code, "co_qualname", None) or code.co_name
                    frames.append([name, code.co_filename])
                flat.append(fid)
                flat.append(line)
            sid = stack_ids[stack] = len(stacks)
            stacks.append(flat)
        rows.append([tid, (t_ns + offset_ns) / 1e9, sid])
    waits = [[(a + offset_ns) / 1e9, (b + offset_ns) / 1e9] for a, b in gil_waits]
    return {
        "type": "samples", "rate_hz": rate_hz, "frames": frames, "stacks": stacks,
        "samples": rows, "gil_waits": waits,
    }  # fmt: skip


class _CallSamplerMixin:
    """Sampling on the agent's thread between its other work (``_tick_call_samples``)."""

    def _init_call_samples(self):
        self.call_samples = collections.deque(maxlen=MAX_CALL_SAMPLES_BUFFERED)
        self.gil_waits = collections.deque(maxlen=MAX_CALL_SAMPLES_BUFFERED)
        self.span_threads = {}  # ident -> (native tid, monotonic time of its last span end)
        self.next_call_sample = float("inf")

    def _call_sample_hz(self):
        return float(self.config.get("call_sample_hz", 0.0) or 0.0)

    def _start_call_samples(self):
        self.next_call_sample = time.monotonic() if self._call_sample_hz() > 0 else float("inf")

    def _stop_call_samples(self):
        self.next_call_sample = float("inf")
        self.call_samples.clear()
        self.gil_waits.clear()
        self.span_threads.clear()

    def _note_wake(self, asked, fds):
        """After the agent's poll: if it timed out (nothing to read) but woke GIL_LATE_S or more
        after ``asked`` (monotonic s), something kept this thread from running."""
        if fds or self.next_call_sample == float("inf"):
            return
        late = time.monotonic() - asked
        if late >= GIL_LATE_S:
            end = time.perf_counter_ns()
            self.gil_waits.append((end - int(late * 1e9), end))

    def _note_span_thread(self, ident, native):
        self.span_threads[ident] = (native, time.monotonic())

    def _sampled_threads(self, now):
        """{ident: native tid} of the threads to sample now."""
        out = {}
        monitor = self.monitor
        if monitor is not None:
            for ident, opened in list(monitor.open.items()):
                if opened:
                    out[ident] = monitor.natives.get(ident, 0)
            for ident in list(monitor.open_by_thread):  # coroutine calls (an ASGI request)
                out[ident] = monitor.natives.get(ident, 0)
        if self.span_threads:
            for ident, (native, seen) in list(self.span_threads.items()):
                if now - seen > SPAN_THREAD_KEEP_S:
                    self.span_threads.pop(ident, None)
                else:
                    out.setdefault(ident, native)
        return out

    def _tick_call_samples(self, now):
        hz = self._call_sample_hz()
        if hz <= 0 or now < self.next_call_sample:
            return
        period = 1.0 / hz
        # on schedule, but a late tick (a profiler window ending) does not bring a burst
        self.next_call_sample = max(self.next_call_sample + period, now + period * 0.5)
        threads = self._sampled_threads(now)
        if not threads:
            return
        t_ns = time.perf_counter_ns()
        frames = sys._current_frames()
        append = self.call_samples.append
        for ident, native in threads.items():
            frame = frames.get(ident)
            if frame is not None:
                append((native, t_ns, stack_of(frame)))
        del frames

    def _flush_call_samples(self, offset_ns):
        if not self.call_samples and not self.gil_waits:
            return
        batch, waits = list(self.call_samples), list(self.gil_waits)
        self.call_samples.clear()
        self.gil_waits.clear()
        self._send(sample_message(batch, offset_ns, self._call_sample_hz(), waits))
