"""Every Python process on the host whose command line matches a pattern (``watch --match``):
the ones running now and the ones that start later, each sampled by a tagged
``PySpyCollector`` of its own, as ``ManyTargets`` does for pids given on the command line.

``MatchedTargets`` looks at ``/proc`` every ``scan_s``: a new process whose command line
matches (and that is Python, and not an infertop) gets its sampler, and its pid is appended to
``pids`` (a list the agents' collector and NVML follow); one that exits gets the ``process PID
exited`` marker and is dropped. The session never ends for want of processes: a host with none
yet is watched until one starts.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from collections.abc import Callable

from infertop.collect.pyspy import PySpyCollector
from infertop.collect.tree import exit_marker, read_cmdline
from infertop.model.events import CollectorStatus, TargetExited

SCAN_S = 2.0
#: a new pid's command line is read again for this long: a fork shows its parent's until it
#: execs (a supervisor starting a server), and the interpreter maps in a moment later
SETTLE_S = 10.0
MAX_TARGETS = 64  # a pattern that matches a whole pool samples the first ones only


class Pattern:
    """``--match``: a glob on the whole command line (``*serve.py*``), or ``/REGEX/`` searched
    in it."""

    def __init__(self, text: str) -> None:
        self.text = text
        if len(text) >= 2 and text.startswith("/") and text.endswith("/"):
            self._re = re.compile(text[1:-1])  # re.error: the command's usage error
            self.matches: Callable[[str], bool] = lambda cmd: self._re.search(cmd) is not None
        else:
            self.matches = lambda cmd: fnmatch.fnmatchcase(cmd, text)


def is_infertop(cmdline: str) -> bool:
    """An infertop (this one or another): its command line holds the pattern too."""
    words = cmdline.split()
    if not words:
        return False
    if os.path.basename(words[0]) == "infertop":
        return True
    return any(w == "infertop" and prev == "-m" for prev, w in zip(words, words[1:]))


def is_python(pid: int) -> bool:
    from infertop.agent.inject.probe import python_info  # the ELF reader: only for --match

    try:
        return python_info(pid) is not None
    except OSError:
        return False


class MatchedTargets:
    name = "py-spy"

    def __init__(
        self,
        pattern: Pattern,
        rate_hz: float,
        window_s: float,
        children: bool = False,
        cpu_every: int = 2,
        scan_s: float = SCAN_S,
        realtime: bool = False,
        max_targets: int = MAX_TARGETS,
    ) -> None:
        self.pattern = pattern
        self.rate_hz, self.window_s, self.children, self.cpu_every = (
            rate_hz, window_s, children, cpu_every
        )  # fmt: skip
        self.scan_s = scan_s
        self.realtime = realtime
        self.max_targets = max_targets
        #: the pids sampled now, in the order they were found (shared with the agents and NVML)
        self.pids: list[int] = []
        self.cmdlines: dict[int, str] = {}
        self.exited = 0
        self.skipped = 0
        self._spies: dict[int, PySpyCollector] = {}
        self._statuses: dict[int, CollectorStatus] = {}
        #: pid -> when first looked at (matched or not), while the pid exists
        self._seen: dict[int, float] = {}
        self._next_scan = 0.0
        self._said = ""
        self._started = False

    # -- Collector protocol -------------------------------------------------------------------
    def start(self) -> None:
        self._started = True
        self.scan()

    def stop(self) -> None:
        self._started = False
        for spy in self._spies.values():
            spy.stop()

    def poll(self) -> list[object]:
        out: list[object] = []
        if time.monotonic() >= self._next_scan:
            self.scan()
        for pid, spy in list(self._spies.items()):
            for ev in spy.poll():
                if isinstance(ev, TargetExited):
                    out.append(exit_marker(ev.t, pid, self.cmdlines.get(pid, "")))
                    self._drop(pid)
                    break
                if isinstance(ev, CollectorStatus):
                    self._statuses[pid] = ev
                else:
                    out.append(ev)
        summary = self._summary()
        if summary is not None:
            out.append(summary)
        return out

    # -- finding them ----------------------------------------------------------------------------
    def scan(self) -> list[int]:
        """Look at ``/proc`` once; returns the pids that started being sampled."""
        self._next_scan = time.monotonic() + self.scan_s
        try:
            now = {int(d) for d in os.listdir("/proc") if d.isdigit()}
        except OSError:
            return []
        t = time.monotonic()
        self._seen = {p: t0 for p, t0 in self._seen.items() if p in now}
        new = []
        for pid in sorted(now - {os.getpid()}):  # its py-spy children are not Python
            if pid in self._spies or t - self._seen.setdefault(pid, t) > SETTLE_S:
                continue
            cmd = read_cmdline(pid)
            if not cmd or is_infertop(cmd) or not self.pattern.matches(cmd) or not is_python(pid):
                continue
            if len(self._spies) >= self.max_targets:
                self.skipped += 1
                self._seen[pid] = float("-inf")  # counted once, not looked at again
                continue
            spy = PySpyCollector(pid, self.rate_hz, self.window_s, self.children, tag=True,
                                 cpu_every=self.cpu_every, realtime=self.realtime)  # fmt: skip
            self._spies[pid] = spy
            self.cmdlines[pid] = cmd
            self.pids.append(pid)
            if self._started:
                spy.start()
            new.append(pid)
        return new

    def _drop(self, pid: int) -> None:
        spy = self._spies.pop(pid, None)
        if spy is not None:
            spy.stop()
        self._statuses.pop(pid, None)
        self.cmdlines.pop(pid, None)
        if pid in self.pids:
            self.pids.remove(pid)
        self.exited += 1

    def _summary(self) -> CollectorStatus | None:
        """One status for all of them, when it changed."""
        n = len(self._spies)
        if not n:
            state, message = "running", f"no process matches {self.pattern.text!r} yet"
        else:
            running = [p for p, s in self._statuses.items() if s.state == "running"]
            state = "running" if running or len(self._statuses) < n else "failed"
            verb = "process matches" if n == 1 else "processes match"
            message = (
                f"{n} {verb} {self.pattern.text!r} (pids "
                + ", ".join(str(p) for p in self.pids[:8])
                + (" ..." if n > 8 else "")
                + ")"
            )
            bad = [f"pid {p}: {s.message}" for p, s in sorted(self._statuses.items())
                   if s.state in ("failed", "unavailable")]  # fmt: skip
            if bad:
                message += "; " + "; ".join(bad[:3])
        if self.exited:
            message += f", {self.exited} exited"
        if self.skipped:
            message += f", {self.skipped} more not sampled (at most {self.max_targets})"
        if message == self._said:
            return None
        self._said = message
        return CollectorStatus(time.time(), self.name, state, message)
