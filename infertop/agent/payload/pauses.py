"""Pauses of the target as evidence: each garbage collection (``gc.callbacks``) and the lag of
each running asyncio event loop (a heartbeat scheduled on it, late by how much)."""

from __future__ import annotations

import collections
import gc
import sys
import threading
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.constants import (
    LOOP_HEARTBEAT_S,
    LOOP_SCAN_S,
    MAX_LOOPS,
    MAX_PAUSES_BUFFERED,
)
from infertop.agent.payload.safe_reads import CollectorOff, frames_down

# -- end --

#: frames that hold a running event loop: (file suffix, function) -> how to get the loop from
#: the frame's ``self`` (asyncio's own loop, or the Runner of ``asyncio.run``, which also runs
#: uvloop's loop, whose ``run_forever`` has no Python frame)
_LOOP_FRAMES = {
    ("base_events.py", "run_forever"): None,
    ("base_events.py", "_run_once"): None,
    ("runners.py", "run"): "_loop",
}


def _loop_of(frame):
    """The event loop a frame of asyncio's runs, or None."""
    code = frame.f_code
    filename = code.co_filename.replace("\\", "/")
    if "asyncio/" not in filename:
        return None
    attr = _LOOP_FRAMES.get((filename.rsplit("/", 1)[-1], code.co_name), 0)
    if attr == 0:
        return None
    owner = frame.f_locals.get("self")
    loop = getattr(owner, attr, None) if attr else owner
    if loop is None or not hasattr(loop, "call_soon_threadsafe"):
        return None
    try:
        if not loop.is_running() or loop.is_closed():
            return None
    except Exception:
        return None
    return loop


def running_loops(skip_ident=None):
    """{id(loop): (loop, native thread id)} for every thread running an asyncio event loop:
    each stack's frames made in one C call and looked into with the collector off
    (safe_reads.py)."""
    natives = {t.ident: t.native_id for t in threading.enumerate()}
    found = {}
    with CollectorOff():
        frames = sys._current_frames()
        try:
            for ident, top in frames.items():
                if ident == skip_ident:
                    continue
                for frame in frames_down(top, 400):
                    loop = _loop_of(frame)
                    if loop is not None:
                        found[id(loop)] = (loop, natives.get(ident) or 0)
                        break
                if len(found) >= MAX_LOOPS:
                    break
        finally:
            frames = top = frame = None
    return found


class _PausesMixin:
    """GC pauses and event-loop lag, buffered as (kind, ...) tuples and sent by
    ``_flush_pauses`` beside the spans."""

    def _init_pauses(self):
        self.pauses = collections.deque(maxlen=MAX_PAUSES_BUFFERED)
        self.gc_callback = None
        self.gc_started_ns = 0
        self.loops = {}  # id(loop) -> [loop, native tid, beat pending]
        self.next_loop_scan = 0.0
        self.next_heartbeat = 0.0

    def _start_pauses(self):
        if not self.config.get("pauses", True) or self.gc_callback is not None:
            return
        buffer = self.pauses

        def on_gc(phase, info):
            # called on the thread that collects, with the GIL: two clock reads and an append
            try:
                if phase == "start":
                    self.gc_started_ns = time.perf_counter_ns()
                elif self.gc_started_ns:
                    t0, self.gc_started_ns = self.gc_started_ns, 0
                    buffer.append((
                        "gc", threading.get_native_id(), t0, time.perf_counter_ns(),
                        info.get("generation", -1), info.get("collected", 0),
                    ))  # fmt: skip
            except Exception:
                pass

        self.gc_callback = on_gc
        gc.callbacks.append(on_gc)
        self.next_loop_scan = time.monotonic()

    def _stop_pauses(self):
        cb, self.gc_callback = self.gc_callback, None
        if cb is not None:
            try:
                gc.callbacks.remove(cb)
            except ValueError:
                pass
        self.loops = {}
        self.pauses.clear()

    def _pauses_due(self):
        """When the pauses part next needs the agent's thread (monotonic seconds)."""
        if self.gc_callback is None:
            return float("inf")
        return min(self.next_loop_scan, self.next_heartbeat if self.loops else float("inf"))

    def _tick_pauses(self, now):
        if self.gc_callback is None:
            return
        if now >= self.next_loop_scan:
            self.next_loop_scan = now + LOOP_SCAN_S
            self._scan_loops()
        if self.loops and now >= self.next_heartbeat:
            self.next_heartbeat = now + LOOP_HEARTBEAT_S
            self._heartbeat()

    def _scan_loops(self):
        try:
            me = self.thread.ident if self.thread is not None else None
            found = running_loops(skip_ident=me)
        except Exception:
            return
        old = self.loops
        self.loops = {key: old.get(key) or [loop, tid, False] for key, (loop, tid) in found.items()}

    def _heartbeat(self):
        buffer = self.pauses
        for key, entry in list(self.loops.items()):
            loop, tid, pending = entry
            if pending:
                continue  # the last beat has not run yet: it will say how late it was
            scheduled = time.perf_counter_ns()

            def beat(entry=entry, scheduled=scheduled, tid=tid):
                entry[2] = False
                buffer.append(("lag", tid, scheduled, time.perf_counter_ns()))

            try:
                entry[2] = True
                loop.call_soon_threadsafe(beat)
            except Exception:  # closed since the scan
                self.loops.pop(key, None)

    def _flush_pauses(self, offset_ns):
        if not self.pauses:
            return
        gcs, lags = [], []
        popleft = self.pauses.popleft
        while len(gcs) + len(lags) < 20000:
            try:
                item = popleft()
            except IndexError:
                break
            if item[0] == "gc":
                _, tid, t0, t1, gen, collected = item
                gcs.append([tid, (t0 + offset_ns) / 1e9, (t1 + offset_ns) / 1e9, gen, collected])
            else:
                _, tid, t0, t1 = item
                lags.append([tid, (t0 + offset_ns) / 1e9, (t1 - t0) / 1e9])
        self._send({"type": "pauses", "gc": gcs, "loop_lag": lags})
