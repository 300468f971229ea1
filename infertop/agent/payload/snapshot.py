"""CUDA memory snapshots in PyTorch's own format: on request (``memory_snapshot``: the caching
allocator's history recorded for a few seconds, then ``torch.cuda.memory._snapshot()``) and on
an out-of-memory error (``oom_snapshot``: an observer the allocator calls before it raises).

A snapshot can be far larger than a protocol frame (16 MiB): it is pickled as
``torch.cuda.memory._dump_snapshot`` pickles it, into a file of the agent's own socket folder
(0700, the target's user's), and the message names the file; the client copies it and removes it
(docs/memory-snapshot.md). Nothing here runs unless a client asks for it."""

from __future__ import annotations

import os
import pickle
import threading
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.window import _cuda_in_use, _torch

# -- end --

SNAPSHOT_SECONDS = (0.0, 600.0, 10.0)  # lo, hi, default of memory_snapshot's ``seconds``
SNAPSHOT_ENTRIES = (1000, 1000000, 100000)  # lo, hi, default of its ``max_entries``
SNAPSHOT_PREFIX = "memsnap-"
NO_CUDA = "the target has no CUDA device: a CUDA memory snapshot needs one"


def _snapshot_unavailable(torch):
    """(why, reason) when no CUDA snapshot can be taken in this process, else None. Never
    initialises CUDA: a process that has not used it has nothing in its caching allocator."""
    if torch is None:
        return (
            "no-torch",
            "the target has not imported torch: a CUDA memory snapshot needs torch and a CUDA device",
        )
    c = getattr(torch, "_C", None)
    if (
        c is None
        or not hasattr(c, "_cuda_memorySnapshot")
        or not hasattr(c, "_cuda_record_memory_history")
    ):
        return "no-cuda", NO_CUDA + " (this torch is built without CUDA)"
    if not _cuda_in_use(torch):
        return "no-cuda", NO_CUDA + " (torch.cuda was never initialised in it)"
    return None


def _bounded(value, limits, integer):
    lo, hi, default = limits
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ValueError("must be a number")
    if integer:
        return int(min(max(int(value), lo), hi))
    return float(min(max(value, lo), hi))


class _SnapshotMixin:
    """The ``memory_snapshot`` and ``oom_snapshot`` commands (sent through ``_send``)."""

    def _init_snapshot(self):
        self.snapshot_due = None  # monotonic time the running recording ends, or None
        self.snapshot_ours = False  # we turned history recording on (and turn it off)
        self.snapshot_seq = 0
        self.snapshot_files = []  # written for a request, removed when the client goes
        self.oom_armed = False
        self.oom_observer = None  # attached once per process; torch cannot detach it
        self.oom_ready = []  # (path, bytes, device, t) written by the observer, to announce
        self.oom_lock = threading.Lock()

    def _memory_snapshot_cmd(self, msg):
        """Start recording the allocator's history for ``seconds``; the snapshot follows as a
        pushed ``memory_snapshot`` message once they have passed (``_tick_snapshot``)."""
        try:
            seconds = _bounded(msg.get("seconds"), SNAPSHOT_SECONDS, False)
            entries = _bounded(msg.get("max_entries"), SNAPSHOT_ENTRIES, True)
        except ValueError as exc:
            self._send(
                {"type": "error", "message": "memory_snapshot: seconds and max_entries %s" % exc}
            )
            return
        reply = {"type": "ok", "cmd": "memory_snapshot", "started": False, "seconds": seconds}
        torch = _torch()
        missing = _snapshot_unavailable(torch)
        if missing is not None:
            reply["why"], reply["reason"] = missing
        elif self.snapshot_due is not None:
            reply["why"], reply["reason"] = "busy", "a memory snapshot is being recorded already"
        elif self.path is None:
            reply["why"], reply["reason"] = "failed", "the agent has no socket folder to write to"
        else:
            try:
                torch.cuda.memory._record_memory_history(
                    "all", context="all", stacks="python", max_entries=entries
                )
            except Exception as exc:
                reply["why"], reply["reason"] = (
                    "failed",
                    "recording the allocator's history failed: %r" % (exc,),
                )
            else:
                self.snapshot_ours = True
                self.snapshot_due = time.monotonic() + seconds
                reply["started"] = True
                reply["max_entries"] = entries
        self._send(reply)

    def _tick_snapshot(self, now):
        if self.snapshot_due is not None and now >= self.snapshot_due:
            self.snapshot_due = None
            self._send(self._take_snapshot("request"))
        while self.oom_ready and self.client is not None:
            with self.oom_lock:
                path, size, device, t = self.oom_ready.pop(0)
            self._send({"type": "memory_snapshot", "trigger": "oom", "path": path, "bytes": size,
                        "device": device, "t": t})  # fmt: skip

    def _take_snapshot(self, trigger):
        """The snapshot written to a file; the message that says where (or what failed)."""
        torch = _torch()
        msg = {"type": "memory_snapshot", "trigger": trigger, "t": time.time()}
        try:
            snap = torch.cuda.memory._snapshot()
        except Exception as exc:
            msg["error"] = "taking the snapshot failed: %r" % (exc,)
            snap = None
        self._stop_history()
        if snap is not None:
            try:
                msg["path"], msg["bytes"] = self._write_snapshot(snap)
                self.snapshot_files.append(msg["path"])
            except Exception as exc:
                msg["error"] = "writing the snapshot failed: %r" % (exc,)
        return msg

    def _write_snapshot(self, snap):
        """Pickled as ``_dump_snapshot`` does, under a temporary name then renamed, 0600, in the
        socket folder; returns (path, bytes)."""
        folder = os.path.dirname(self.path)
        with self.oom_lock:  # the observer writes from the target's thread
            self.snapshot_seq += 1
            seq = self.snapshot_seq
        name = "%s%d-%d.pickle" % (SNAPSHOT_PREFIX, os.getpid(), seq)
        path = os.path.join(folder, name)
        tmp = path + ".tmp"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600
        )
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(snap, fh)
            os.rename(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return path, os.path.getsize(path)

    def _stop_history(self):
        if not self.snapshot_ours:
            return
        self.snapshot_ours = False
        try:
            _torch().cuda.memory._record_memory_history(None)
        except Exception:
            pass

    def _end_snapshots(self):
        """The client went: a recording stops, the files it did not collect go. (An OOM
        snapshot's file stays for the next client: the process may be gone by then.)"""
        if self.snapshot_due is not None:
            self.snapshot_due = None
            self._stop_history()
        files, self.snapshot_files = self.snapshot_files, []
        for path in files:
            try:
                os.unlink(path)
            except OSError:
                pass

    # -- on out of memory ------------------------------------------------------------------------

    def _oom_snapshot_cmd(self, msg):
        """``{"cmd": "oom_snapshot", "on": bool}``: arm (or disarm) the observer."""
        on = msg.get("on", True)
        if not isinstance(on, bool):
            self._send({"type": "error", "message": "oom_snapshot: on must be true or false"})
            return
        reply = {"type": "ok", "cmd": "oom_snapshot", "armed": False}
        torch = _torch()
        missing = _snapshot_unavailable(torch)
        if not on:
            self.oom_armed = False
        elif missing is not None:
            reply["why"], reply["reason"] = missing
        elif self.path is None:
            reply["why"], reply["reason"] = "failed", "the agent has no socket folder to write to"
        else:
            try:
                if self.oom_observer is None:
                    observer = self._make_oom_observer()
                    torch._C._cuda_attach_out_of_memory_observer(observer)
                    self.oom_observer = observer
                self.oom_armed = True
                reply["armed"] = True
            except Exception as exc:
                reply["why"], reply["reason"] = "failed", "arming the observer failed: %r" % (exc,)
        self._send(reply)

    def _make_oom_observer(self):
        """The function the allocator calls on the thread whose allocation failed, before it
        raises. torch has no way to detach it: disarmed (or the agent gone), it returns at once.
        It holds the agent weakly: the agent may leave while the process lives on."""
        import weakref

        ref = weakref.ref(self)

        def infertop_oom_observer(device, alloc, device_allocated, device_free):
            agent = ref()
            if agent is None or not agent.oom_armed or agent.path is None:
                return
            agent.oom_armed = False  # one snapshot per arming: a loop of OOMs writes one file
            try:
                snap = _torch().cuda.memory._snapshot()
                path, size = agent._write_snapshot(snap)
            except Exception:
                return
            with agent.oom_lock:
                agent.oom_ready.append((path, size, int(device), time.time()))

        return infertop_oom_observer
