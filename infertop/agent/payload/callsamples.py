"""The call sampler: the stacks of the threads inside stage calls, each with its time, so that
the host can tie stacks to calls (tail attribution: where the slow calls spent their time).

Only threads that are in a timed call or that ended an ``infertop.stage`` span in the last
``SPAN_THREAD_KEEP_S`` are looked at, on the agent's own thread, ``call_sample_hz`` times a
second: one ``sys._current_frames()`` and a walk of those threads' frames, each in one C call
with the collector off (safe_reads.py: a walk in a Python loop killed targets on 3.11). Code
objects are held only until the next flush.

While it samples, the agent's own wake-ups are timed too (``_note_sleep`` / ``_note_wake``): a
wake-up GIL_LATE_S late or more is split into the thread's wait for a CPU (its run-queue delay,
``/proc/self/task/TID/schedstat``) and the rest, its wait for the GIL. The GIL part is a GIL
wait of the target's only where at least two of the target's own Python threads ran during it
(their CPU clocks): with one, that thread held the GIL and no thread of the target waited; and
only while they ran: a holder kept off a CPU by a busy host makes the rest a wait for a CPU.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.constants import (
    GIL_LATE_S,
    GIL_THREADS_SCAN_S,
    MAX_CALL_SAMPLES_BUFFERED,
    MAX_GIL_THREADS,
    MAX_SAMPLE_DEPTH,
    RUN_DELAY_READ_S,
    SPAN_THREAD_KEEP_S,
)
from infertop.agent.payload.safe_reads import CollectorOff, code_lines

# -- end --


def stack_of(frame):
    """((code, line or None), ...) root first, at most MAX_SAMPLE_DEPTH innermost frames."""
    return code_lines(frame, MAX_SAMPLE_DEPTH)[::-1]


def thread_clock_id(tid):
    """The CPU-time clock of thread ``tid`` of this process (Linux: what glibc's
    ``pthread_getcpuclockid`` makes): ``time.clock_gettime_ns`` reads it without letting go of
    the GIL (1-6 us); a thread that is gone (or another process's) makes it fail with EINVAL,
    never crash."""
    return ((~tid) << 3) | 6  # CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED


def read_run_delay(fd):
    """ns the thread of an open ``/proc/self/task/TID/schedstat`` has waited on a run queue
    for a CPU since it started (the second field); None where it cannot be read."""
    try:
        return int(os.pread(fd, 128, 0).split()[1])
    except (OSError, ValueError, IndexError):
        return None


def threads_that_ran(clocks):
    """(how many, s of CPU together) of [(clock, CPU ns then), ...] that have run since (a
    thread gone counts not)."""
    n, total = 0, 0
    for clock, ns in clocks:
        try:
            d = time.clock_gettime_ns(clock) - ns
        except OSError:
            continue
        if d > 0:
            n += 1
            total += d
    return n, total / 1e9


def late_wake_parts(late, cpu_delay, ran, ran_cpu):
    """(s the target's threads waited for a CPU, s they waited for the GIL), each 0 under
    GIL_LATE_S, of a wake-up of the agent's thread ``late`` s late, during which its run-queue
    delay grew ``cpu_delay`` s (None: not known) and ``ran`` of the target's Python threads ran,
    for ``ran_cpu`` s of CPU together (0 threads: none read).

    The lateness less the run-queue delay is the agent's wait for the GIL, and the GIL's holder
    is among the threads that ran: only while they ran was it the GIL that kept the agent
    waiting; a holder kept off a CPU (a busy host) makes the rest a wait for a CPU. The GIL's
    part is a wait of the target's own only where two or more of its threads ran: one alone
    held the GIL (a C call keeping it) and no thread of the target waited for it."""
    cpu = min(late, max(0.0, cpu_delay or 0.0))
    gil = late - cpu
    if ran:
        held = min(gil, ran_cpu)
        cpu, gil = cpu + gil - held, held
    if ran < 2:
        gil = 0.0
    return (cpu if cpu >= GIL_LATE_S else 0.0), (gil if gil >= GIL_LATE_S else 0.0)


def sample_message(samples, offset_ns, rate_hz, gil_waits=(), cpu_waits=()):
    """One ``samples`` message for buffered (native tid, perf ns, stack) samples: its own frame
    and stack tables (so each message stands alone), ids local to the message; and the
    (start ns, end ns) stretches the agent's thread woke late for: waiting for the GIL while
    the target's threads did too (``gil_waits``), waiting for a CPU (``cpu_waits``)."""
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
                flat.append(line or 0)
            sid = stack_ids[stack] = len(stacks)
            stacks.append(flat)
        rows.append([tid, (t_ns + offset_ns) / 1e9, sid])
    waits = [[(a + offset_ns) / 1e9, (b + offset_ns) / 1e9] for a, b in gil_waits]
    cpu = [[(a + offset_ns) / 1e9, (b + offset_ns) / 1e9] for a, b in cpu_waits]
    return {
        "type": "samples", "rate_hz": rate_hz, "frames": frames, "stacks": stacks,
        "samples": rows, "gil_waits": waits, "cpu_waits": cpu,
    }  # fmt: skip


class _CallSamplerMixin:
    """Sampling on the agent's thread between its other work (``_tick_call_samples``)."""

    def _init_call_samples(self):
        self.call_samples = collections.deque(maxlen=MAX_CALL_SAMPLES_BUFFERED)
        self.gil_waits = collections.deque(maxlen=MAX_CALL_SAMPLES_BUFFERED)
        self.cpu_waits = collections.deque(maxlen=MAX_CALL_SAMPLES_BUFFERED)
        self.span_threads = {}  # ident -> (native tid, monotonic time of its last span end)
        self.next_call_sample = float("inf")
        self.sched_fd = None  # the agent thread's schedstat, open while sampling
        self.sched_tid = None
        self.sleep_mark = None  # (run delay ns, [(clock, cpu ns), ...]) as the poll began
        self.delay_mark = None  # this thread's run-queue delay (ns) when last read ...
        self.delay_read_at = float("-inf")  # ... and then (monotonic s)
        self.sampler_thread = (None, None)  # (ident, native id) of the thread that polls
        self.gil_threads = []  # clocks of the target's Python threads that ran lately
        self.gil_thread_cpu = {}  # native tid -> CPU ns at the last look
        self.next_gil_scan = 0.0

    def _call_sample_hz(self):
        return float(self.config.get("call_sample_hz", 0.0) or 0.0)

    def _start_call_samples(self):
        self.next_call_sample = time.monotonic() if self._call_sample_hz() > 0 else float("inf")

    def _stop_call_samples(self):
        self.next_call_sample = float("inf")
        self.call_samples.clear()
        self.gil_waits.clear()
        self.cpu_waits.clear()
        self.span_threads.clear()
        self.sleep_mark = None
        self.delay_mark = None
        self.delay_read_at = float("-inf")
        self.gil_threads = []
        self.gil_thread_cpu = {}
        self.next_gil_scan = 0.0
        self._close_schedstat()

    def _close_schedstat(self):
        """Close the agent thread's schedstat (at stop; in a forked child, whose copy is of
        its parent's thread)."""
        fd, self.sched_fd, self.sched_tid = self.sched_fd, None, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def _run_delay(self, me):
        """This thread's run-queue wait so far (ns), None without schedstat (the file is opened
        once and read with pread)."""
        if self.sched_tid != me:
            if self.sched_fd is not None:
                try:
                    os.close(self.sched_fd)
                except OSError:
                    pass
                self.sched_fd = None
            self.sched_tid = me
            try:
                self.sched_fd = os.open("/proc/self/task/%d/schedstat" % me, os.O_RDONLY)
            except (OSError, AttributeError):
                return None
        if self.sched_fd is None:
            return None
        return read_run_delay(self.sched_fd)

    def _scan_gil_threads(self, me):
        """The clocks of the target's Python threads (not this one) whose CPU time moved since
        the last look, at most MAX_GIL_THREADS: a thread asleep for a second (an idle pool
        worker) is not read around every poll."""
        seen, now = self.gil_thread_cpu, {}
        busy = []
        for t in threading.enumerate():
            tid = getattr(t, "native_id", None)
            if not tid or tid == me or tid in now:
                continue
            clock = thread_clock_id(tid)
            try:
                ns = time.clock_gettime_ns(clock)
            except (OSError, OverflowError, ValueError):
                continue
            now[tid] = ns
            if ns != seen.get(tid) and len(busy) < MAX_GIL_THREADS:
                busy.append(clock)
        self.gil_thread_cpu = now
        self.gil_threads = busy

    def _note_sleep(self):
        """Before the agent's poll, while sampling: the CPU clocks of the target's threads that
        ran lately, and its run-queue delay: read after each late wake-up and otherwise every
        RUN_DELAY_READ_S (a read costs ~9 us after a sleep, the clocks ~1-6 us), so that between
        two reads it can only grow by what the on-time wake-ups waited for a CPU."""
        self.sleep_mark = None
        if self.next_call_sample == float("inf"):
            return
        ident, me = self.sampler_thread
        if ident != threading.get_ident():  # (a native id costs a system call)
            ident, me = self.sampler_thread = (threading.get_ident(), threading.get_native_id())
        now = time.monotonic()
        if now >= self.next_gil_scan:
            self.next_gil_scan = now + GIL_THREADS_SCAN_S
            self._scan_gil_threads(me)
        if now - self.delay_read_at >= RUN_DELAY_READ_S:
            self.delay_mark, self.delay_read_at = self._run_delay(me), now
        clocks = []
        if self.gil_threads:
            for clock in self.gil_threads:
                try:
                    clocks.append((clock, time.clock_gettime_ns(clock)))
                except OSError:
                    continue
        self.sleep_mark = (self.delay_mark, clocks)

    def _note_wake(self, asked, fds):
        """After the agent's poll: if it timed out (nothing to read) but woke GIL_LATE_S or more
        after ``asked`` (monotonic s), something kept this thread from running: a CPU for as
        long as its run-queue delay grew, else the GIL; whose wait that was, the target's
        threads' or only this one's, ``late_wake_parts`` tells from what they ran meanwhile."""
        mark, self.sleep_mark = self.sleep_mark, None
        if fds or mark is None or self.next_call_sample == float("inf"):
            return
        late = time.monotonic() - asked
        if late < GIL_LATE_S:
            return
        end = time.perf_counter_ns()
        before, clocks = mark
        delay = None
        if before is not None:
            after = self._run_delay(self.sampler_thread[1])
            self.delay_mark, self.delay_read_at = after, time.monotonic()  # the next poll's too
            if after is not None:
                delay = (after - before) / 1e9
        ran, ran_cpu = self._threads_ran(clocks)
        cpu, gil = late_wake_parts(late, delay, ran, ran_cpu)
        if cpu:
            start = end - int(late * 1e9)
            self.cpu_waits.append((start, start + int(cpu * 1e9)))
        if gil:
            self.gil_waits.append((end - int(gil * 1e9), end))

    def _threads_ran(self, clocks):
        return threads_that_ran(clocks)

    def _note_span_thread(self, ident, native):
        self.span_threads[ident] = (native, time.monotonic())

    def _sampled_threads(self, now):
        """{ident: native tid} of the threads to sample now."""
        out = {}
        for monitor in (self.monitor, getattr(self, "body_timer", None)):  # (WSGI on 3.12+)
            if monitor is None:
                continue
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
        append = self.call_samples.append
        with CollectorOff():
            frames = sys._current_frames()
            try:
                for ident, native in threads.items():
                    frame = frames.get(ident)
                    if frame is not None:
                        append((native, t_ns, stack_of(frame)))
            finally:
                frame = frames = None

    def _flush_call_samples(self, offset_ns):
        if not self.call_samples and not self.gil_waits and not self.cpu_waits:
            return
        batch, waits, cpu = list(self.call_samples), list(self.gil_waits), list(self.cpu_waits)
        self.call_samples.clear()
        self.gil_waits.clear()
        self.cpu_waits.clear()
        self._send(sample_message(batch, offset_ns, self._call_sample_hz(), waits, cpu))
