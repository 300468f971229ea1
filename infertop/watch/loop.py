"""``infertop watch``'s loop: the live collection without a UI, the last seconds in a ring, the
triggers asked four times a second, and an incident file written when one fires.

Signals: SIGUSR1 captures an incident now; SIGINT, SIGTERM and SIGHUP stop (an incident being
written is closed with what it has, the agent detached); a second one stops at once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, TextIO

from infertop.analysis.triggers import Firing, Rule, Triggers
from infertop.analysis.untimed import Untimed, untimed
from infertop.collect.base import Collector
from infertop.config import Config
from infertop.errors import EXIT_OK, InfertopError
from infertop.model.events import CollectorStatus, Event, TargetInfo
from infertop.push.live import LivePush, PushOptions
from infertop.record.incident import EventRing, Incident, incident_marker, incident_path, utc
from infertop.sources import LiveSource

TICK_S = 0.25
RING_SLACK_S = 5.0  # kept beyond --before: the collectors' windows end up to a second late
FAST_NVML_S = 0.1  # NVML's interval during an incident's --after seconds
STATUS_EVERY_S = 30.0  # without a terminal: one status line this often (and on each change)
#: watch says which stages no trigger can watch (no timed calls) once it has watched this long
#: (the agent connected, its first calls come, a few windows of samples), and looks again this
#: often
UNTIMED_AFTER_S = 10.0
UNTIMED_EVERY_S = 5.0

#: what signal.signal takes and gives back
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


@dataclass(frozen=True)
class WatchOptions:
    """What ``watch`` was asked for (``commands/watch.py`` reads and checks them)."""

    out_dir: str
    before: float = 30.0
    after: float = 10.0
    rules: tuple[Rule, ...] = ()
    auto: bool = True
    window_s: float = 2.0
    cooldown: float = 60.0
    max_incidents: int = 20
    duration: float | None = None
    as_json: bool = False  # --json: progress, messages and the end as JSON lines on stderr


def _size(n: float) -> str:
    return f"{n / 1024:.0f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MiB"


class Watch:
    """One watch session (see the module); ``run`` returns the exit code."""

    def __init__(
        self,
        target: TargetInfo,
        config: Config,
        opts: WatchOptions,
        collectors: Sequence[Collector] | None = None,
        statuses: Sequence[CollectorStatus] = (),
        out: TextIO | None = None,
        err: TextIO | None = None,
        push: PushOptions | None = None,
    ) -> None:
        self.target = target
        self.opts = opts
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.src = LiveSource(target, config, collectors=collectors, statuses=statuses)
        self.ring = EventRing(opts.before + RING_SLACK_S)
        self.ring.add(self.src.definitions(), time.time())
        self.triggers = Triggers(
            opts.rules, auto=opts.auto, window_s=opts.window_s, cooldown_s=opts.cooldown
        )
        self.src.listeners.append(self._batch)
        self.push = LivePush(self.src, push) if push is not None else None
        self.incident: Incident | None = None
        self.firing: Firing | None = None
        self.written: list[str] = []
        self.manual = False
        self.stopping: str | None = None  # why the loop ends, once it should
        self.signalled = False
        self.armed_said: set[str] = set()
        self.said_agent_gone = False
        self.oom_said: set[str] = set()  # --oom-snapshot: the agent's notes already said
        self._tty = self.err.isatty() and not opts.as_json
        self._last_line_t = -1e9
        self.untimed: Untimed | None = None  # the stages without timed calls, once looked at
        self._untimed_t = -1e9
        self._untimed_said: tuple[set[str], str] = (set(), "")

    # -- events -----------------------------------------------------------------------------
    def _batch(self, batch: list[Event]) -> None:
        self.ring.add(batch, time.time())
        self.triggers.add(batch)  # its spans, and its processes' CPU waits (CpuWait)
        if self.incident is not None:
            self.incident.write(batch)
        for ev in batch:  # --oom-snapshot: armed, not armed (no CUDA), a snapshot written
            if isinstance(ev, CollectorStatus) and ev.collector in ("agent", "agents"):
                self._say_oom(ev.message)

    def _say_oom(self, message: str) -> None:
        """The agent client's note on out-of-memory snapshots (``collect/agent/snapshot.py``,
        after the profiling part of its status), each said once on stderr."""
        note = next((p for p in reversed(message.split("; ")) if "out-of-memory" in p), None)
        if note is not None and note not in self.oom_said:
            self.oom_said.add(note)
            self._say(f"infertop watch: {note}")

    def spans_live(self) -> bool:
        """False once the agent's connection ended: no spans can come, and a stage's rate
        falling to nothing would be infertop's doing, not the target's."""
        agent = self.src.session.statuses.get("agent")
        return agent is None or agent.state not in ("stopped", "failed")

    # -- signals ----------------------------------------------------------------------------
    def _on_usr1(self, signum: int, frame: object) -> None:
        self.manual = True

    def _on_stop(self, signum: int, frame: object) -> None:
        if self.signalled:
            raise KeyboardInterrupt  # a second one: stop now
        self.signalled = True
        names: dict[int, str] = {
            signal.SIGINT: "interrupted", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"
        }
        self.stopping = self.stopping or names.get(signum, f"signal {signum}")

    def _install(self) -> dict[signal.Signals, _Handler]:
        old = {signal.SIGUSR1: signal.signal(signal.SIGUSR1, self._on_usr1)}
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, self._on_stop)
        return old

    # -- incidents --------------------------------------------------------------------------
    def _begin(self, firing: Firing) -> None:
        o = self.opts
        path = incident_path(o.out_dir, firing.t)
        marker = incident_marker(firing.t, firing.trigger, firing.reason, o.before, o.after)
        try:
            self.incident = Incident(path, self.ring, marker, o.before, o.after)
        except InfertopError as exc:  # the directory went away or turned read-only
            self._say(f"infertop watch: {firing.reason}: {exc.message}; still watching")
            return
        self.firing = firing
        self.triggers.note(firing.t)
        for c in self.src.collectors:
            ask = getattr(c, "profile_now", None)  # the agent: a profiler window now
            if ask is not None:
                ask()
            faster = getattr(c, "sample_faster", None)  # NVML: readings 5x as often
            if faster is not None:
                faster(FAST_NVML_S, o.after)
        self._say(
            f"incident at {utc(firing.t)}: {firing.reason}; writing {path} for {o.after:g} s more"
        )

    def _finish(self, cut: str | None = None) -> None:
        inc, firing = self.incident, self.firing
        if inc is None or firing is None:
            return
        self.incident = self.firing = None
        failed = inc.failed
        path = inc.close()
        self.written.append(path)
        note = f" ({cut})" if cut else ""
        print(f"{utc(firing.t)}  {firing.reason}  → {path}{note}", file=self.out, flush=True)
        if failed:
            self._say(f"infertop watch: {path}: {failed}")
        if len(self.written) >= self.opts.max_incidents and self.stopping is None:
            self.stopping = f"--max-incidents {self.opts.max_incidents} reached"

    # -- progress ---------------------------------------------------------------------------
    def _armed(self, now: float) -> None:
        """Say when the auto trigger starts watching a stage (it has 20 s of its calls)."""
        if not self.triggers.auto:
            return
        armed = [s for s in self.triggers.armed(now) if s not in self.armed_said]
        if armed:
            self.armed_said.update(armed)
            self._say(f"auto trigger watching {', '.join(armed)}")

    def _look_untimed(self, now: float, elapsed: float) -> None:
        """Which stages have samples but no timed call (the triggers cannot watch them), why,
        and what to do (``analysis/untimed.py``): said once, and again when it changes."""
        if elapsed < UNTIMED_AFTER_S or now - self._untimed_t < UNTIMED_EVERY_S:
            return
        self._untimed_t = now
        s = self.src.session
        counts = dict(s.folded.stage_counts)  # the CPU windows': every active sample
        for ws in s.windows:
            if not ws.wall:
                for stage, n in ws.stage_counts.items():
                    counts[stage] = counts.get(stage, 0) + n
        active = sum(n for stage, n in counts.items() if stage != "idle")
        shares = [(stage, n / active) for stage, n in counts.items() if stage != "idle" and active]
        agent = s.statuses.get("agent")
        gap = untimed(s.target.python, agent, tuple(s.status_notes), shares, self.triggers.stages)
        self.untimed = gap
        if gap is None:
            return
        said, why = self._untimed_said
        if why != gap.why or not set(gap.stages) <= said:
            self._untimed_said = (said | set(gap.stages), gap.why)
            self._say(f"infertop watch: the triggers cannot watch {gap.line()}")

    def _say(self, line: str | dict, key: str = "message") -> None:
        if self._tty:
            self.err.write("\r\x1b[K")
        if self.opts.as_json:
            line = json.dumps(line if isinstance(line, dict) else {key: line})
        print(line, file=self.err, flush=True)

    def _doc(self, elapsed: float) -> dict[str, object]:
        """The status for ``--json``."""
        doc: dict[str, object] = {"pid": self.target.pid, "watching": self._what(),
                                  "elapsed_s": round(elapsed, 1),
                                  "incidents": list(self.written), "out": self.opts.out_dir}  # fmt: skip
        if self.incident is not None:
            doc["writing"] = self.incident.path
        if self.push is not None:
            doc["push"] = self.push.progress()
        return doc

    def _status(self, elapsed: float, now: float) -> str:
        o = self.opts
        parts = [f"watching {self._what()}: {elapsed:.0f} s"]
        if o.duration:
            parts[0] += f"/{o.duration:g}"
        if self.incident is not None:
            left = max(0.0, self.incident.ends - now)
            parts.append(f"writing {os.path.basename(self.incident.path)} ({left:.0f} s to go)")
        else:
            parts.append(self._trigger_state(now))
        parts.append(f"{len(self.written)} incident" + ("" if len(self.written) == 1 else "s"))
        span = now - self.ring.oldest if self.ring.oldest is not None else 0.0
        parts.append(f"last {min(span, o.before):.0f} s in memory ({_size(self.ring.bytes)})")
        if self.push is not None:
            parts.append(self.push.status())
        return ", ".join(parts) + f" → {o.out_dir}"

    def _what(self) -> str:
        """``pid N``, or with ``--match`` what the sampler says it found."""
        if self.target.pid is not None:
            return f"pid {self.target.pid}"
        spy = self.src.session.statuses.get("py-spy")
        return spy.message if spy is not None and spy.message else str(self.target.cmdline)

    def _trigger_state(self, now: float) -> str:
        t = self.triggers
        if not t.stages:
            agent = self.src.session.statuses.get("agent")
            gap = self.untimed
            if gap is not None:  # looked at: on which Python, and why (the line said above)
                on = f"Python {gap.python}: " if gap.python else ""
                return f"no stage calls ({on}{gap.why})"
            why = f" (agent: {agent.message})" if agent and agent.state != "running" else ""
            return "no stage calls yet" + why
        if not self.spans_live():
            return "stage calls stopped with the agent (kill -USR1 still captures)"
        if t.cooling(now):
            return f"cooling down {t.cooldown_s - (now - t.last_fired):.0f} s"
        if t.auto:
            armed = t.armed(now)
            if not armed:
                return "auto: gathering 20 s of calls"
            on = "auto on " + ", ".join(armed[:4]) + (" ..." if len(armed) > 4 else "")
            if self.untimed is not None:
                on += " (not " + ", ".join(self.untimed.stages[:3]) + ": no timed calls)"
            return on
        return f"{len(t.rules)} rule" + ("" if len(t.rules) == 1 else "s")

    def _progress(self, elapsed: float, now: float) -> None:
        """The status line: rewritten in place on a terminal, else one every STATUS_EVERY_S."""
        if self.opts.as_json:
            if now - self._last_line_t >= STATUS_EVERY_S:
                self._say(self._doc(elapsed))
                self._last_line_t = now
        elif self._tty:  # one line, cut to the terminal's width (a wrapped one would pile up)
            width = shutil.get_terminal_size((100, 24)).columns
            self.err.write("\r\x1b[K" + self._status(elapsed, now)[: max(20, width - 1)])
            self.err.flush()
        elif now - self._last_line_t >= STATUS_EVERY_S:
            print(self._status(elapsed, now), file=self.err, flush=True)
            self._last_line_t = now

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> int:
        o = self.opts
        old = self._install()
        started = time.monotonic()
        reason = "stopped"
        self.src.start()
        try:
            while True:
                self.src.pump()
                now = time.time()
                elapsed = time.monotonic() - started
                if self.incident is not None and (self.incident.due(now) or self.incident.failed):
                    self._finish()
                if self.manual:
                    self.manual = False
                    if self.incident is not None:
                        self._say("SIGUSR1: an incident is being written; ask again after it")
                    else:
                        self._begin(Firing(now, "manual", "manual capture (SIGUSR1)"))
                elif self.incident is None and self.stopping is None:
                    if self.spans_live():
                        firing = self.triggers.check(now)
                        if firing is not None:
                            self._begin(firing)
                        self._armed(now)
                    elif not self.said_agent_gone and self.triggers.stages:
                        self.said_agent_gone = True
                        agent = self.src.session.statuses.get("agent")
                        why = agent.message if agent else "?"
                        self._say(f"infertop watch: the agent's connection ended ({why}): "
                                  "stage triggers are off; kill -USR1 still captures")  # fmt: skip
                if self.src.done:
                    reason = "the target exited"
                    break
                if self.stopping is not None:
                    reason = self.stopping
                    break
                if o.duration is not None and elapsed >= o.duration:
                    reason = "duration reached"
                    break
                if self.push is not None:
                    self.push.tick()
                    for warning in self.push.warnings():
                        self._say(warning, "warning")
                self._look_untimed(now, elapsed)
                self._progress(elapsed, now)
                time.sleep(TICK_S)
        except KeyboardInterrupt:
            reason = "interrupted"
        finally:
            try:
                self.src.stop()  # detaches the agent; its last events still reach an incident
            finally:
                self._finish(cut=None if self.incident is None or self.incident.due(time.time())
                             else f"cut short: {reason}")  # fmt: skip
                for sig, handler in old.items():
                    signal.signal(sig, handler)
                if self.push is not None:
                    self.push.close()  # the last (part) interval too
        if self._tty:
            self.err.write("\r\x1b[K")
        n = len(self.written)
        elapsed = time.monotonic() - started
        if self.push is not None:
            for warning in self.push.warnings():
                self._say(warning, "warning")
        if o.as_json:
            self._say({"end": reason, **self._doc(elapsed)})
            return EXIT_OK
        print(
            f"watched {self._what()} for {elapsed:.0f} s: {n} incident"
            + ("" if n == 1 else "s") + f" in {o.out_dir} ({reason})",
            file=self.err, flush=True,
        )  # fmt: skip
        if self.push is not None:
            print(self.push.summary(), file=self.err, flush=True)
        return EXIT_OK
