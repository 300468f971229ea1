"""py-spy's scheduling priority with ``[collect] realtime = true``: real-time while its ticks
come late, normal otherwise.

py-spy's ticks are timer wake-ups. With a core free they come on time. Where the target's
threads fill every core (a Rust tokenizer's pool, torch's intra-op threads), a woken py-spy
waits in a run queue, and then takes the ticks it missed back to back: they land in the stage
after the one that held the cores, which reads high, and that one low. Measured on the
text-generation sample with the Rust tokenizer against its perf_counter truth, ~3,000 wall
samples (docs/performance.md, "Late ticks"): forward +2.1 to +4.8 points at normal priority
(niced to -20 too), -0.2 to -3.7 at SCHED_FIFO 1, the lowest real-time priority, where a woken
py-spy runs at once. Its CPU is the same either way.

Real-time is not free, hence not the default: woken, py-spy takes the CPU it last ran on at
once, preempting the target there (that sample's batcher thread waited for a CPU 25 ms a
second against 4 at normal priority). So where asked it is used only while needed, judged by
the kernel's accounting of py-spy's own threads:

- py-spy starts each session at normal priority. A window in which its threads waited on a run
  queue more than ``LATE_PER_TICK_S`` a tick on average makes the next ones real-time, where
  the kernel allows it (root, CAP_SYS_NICE or an RLIMIT_RTPRIO); where it refuses, never again.
- Every ``PROBE_EVERY`` real-time windows one runs at normal priority again and judges anew
  (the neighbour that filled the cores may have gone).
- A real-time py-spy that took over ``MAX_CPU`` of a CPU since it started (a target with so
  many threads that reading them takes longer than a tick, so py-spy samples back to back) is
  put back at normal priority at once, and never made real-time again.
"""

from __future__ import annotations

import os

from infertop import procfs
from infertop.collect.thread_cpu import run_and_wait_ns

#: py-spy's waiting per tick beyond which its ticks count as late: measured at 50-200 Hz, with
#: a core free 14-64 µs (its start-up's waits included), the text-generation sample filling
#: both cores 0.5-1.6 ms
LATE_PER_TICK_S = 0.25e-3
PROBE_EVERY = 30  # real-time windows between two at normal priority
MAX_CPU = 0.5  # of a CPU, since py-spy started: sampling back to back
CHECK_AFTER_S = 0.25  # py-spy's CPU is judged from this far into a window
REALTIME_PRIORITY = 1


def make_realtime() -> None:
    """In a child before exec: SCHED_FIFO at ``REALTIME_PRIORITY`` (its threads inherit it), or
    nothing where the kernel refuses."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
    except (OSError, AttributeError):
        pass


class SamplerPriority:
    """Decides, window by window, whether the next py-spy is real-time (see the module)."""

    def __init__(self, rate_hz: float, enabled: bool = True) -> None:
        self.rate_hz = rate_hz
        self.late = False  # the last window at normal priority had its ticks late
        #: the user asked for it (``[collect] realtime``); False once the kernel refused, or a
        #: real-time py-spy spun
        self.allowed = enabled
        self.realtime = False  # the running py-spy's
        self._in_a_row = 0

    def next_window(self) -> bool:
        """Whether the py-spy about to start is to be real-time."""
        self.realtime = self.allowed and self.late and self._in_a_row < PROBE_EVERY
        self._in_a_row = self._in_a_row + 1 if self.realtime else 0
        return self.realtime

    def started(self, pid: int) -> None:
        """py-spy ``pid`` started: where it was to be real-time and is not, the kernel refused."""
        if self.realtime:
            try:
                refused = os.sched_getscheduler(pid) != os.SCHED_FIFO
            except OSError:
                return  # gone already: the window says why
            if refused:
                self.allowed = self.realtime = False

    def watch(self, pid: int, elapsed: float) -> None:
        """Mid-window: a real-time py-spy that has taken over MAX_CPU of a CPU goes back to
        normal priority now, and for good."""
        if not self.realtime or elapsed < CHECK_AFTER_S:
            return
        on, _ = run_and_wait_ns([pid])
        if on / 1e9 <= MAX_CPU * elapsed:
            return
        self.allowed = self.realtime = False
        try:
            tids = procfs.threads(pid)
        except OSError:
            return  # gone
        for tid in tids:
            try:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            except OSError:
                pass  # gone

    def ended(self, pid: int, elapsed: float) -> None:
        """Before py-spy ``pid`` is stopped: a window at normal priority judges its lateness."""
        if self.realtime or elapsed <= 0:
            return
        self.judge(run_and_wait_ns([pid])[1] / 1e9, elapsed)

    def judge(self, waited_s: float, elapsed: float) -> None:
        """A py-spy at normal priority waited ``waited_s`` for a CPU in ``elapsed`` seconds."""
        self.late = waited_s > LATE_PER_TICK_S * elapsed * self.rate_hz
