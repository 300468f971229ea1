"""A live session's CPU windows, cut into one pprof profile per process per interval and handed
to the sender: ``watch --push`` and ``record --push`` (docs/export.md, "Push to a backend")."""

from __future__ import annotations

import os
import re
import socket
import time
import urllib.parse
from dataclasses import dataclass

from infertop import __version__
from infertop.model.events import Event, SampleWindow
from infertop.model.pprof_build import CpuProfile, program_name
from infertop.push.backends import Endpoint, Labels, Series, encode, series_labels
from infertop.push.sender import Sender
from infertop.push.spool import Spool
from infertop.sources import LiveSource
from infertop.words import plural

MIB = 1024 * 1024


@dataclass(frozen=True)
class PushOptions:
    endpoint: Endpoint
    interval_s: float = 15.0
    service: str | None = None  # default: the target's program (service_name)
    labels: Labels = ()  # more series labels (--push-label)
    spool_dir: str | None = None  # None: no spool, what the queue cannot hold is dropped
    spool_bytes: int = 64 * MIB


def service_name(cmdline: str | None) -> str:
    """What a target is called by default: ``python serve.py`` -> ``serve``, ``python -m
    app.main`` -> ``app.main``, ``/usr/bin/uvicorn app:api`` -> ``uvicorn``."""
    words = (cmdline or "").split()
    if not words:
        return "python"
    prog = program_name(words[0])
    if not prog.startswith("python"):
        return prog
    rest = words[1:]
    i = 0
    while i < len(rest):
        w = rest[i]
        if w == "-m" and i + 1 < len(rest):
            return rest[i + 1]
        if w.startswith("-m") and len(w) > 2:
            return w[2:]
        if w == "-c":
            return prog
        if w.startswith("-"):
            i += 2 if w in ("-X", "-W", "-Q") else 1  # the options that take a value
            continue
        base = os.path.basename(w)
        return base[:-3] if base.endswith(".py") else base
    return prog


def spool_name(endpoint: Endpoint) -> str:
    """The spool's sub-folder for one backend (``pyroscope-host_4040``): what waits for one
    backend is never sent to another."""
    where = urllib.parse.urlsplit(endpoint.url)
    return (
        endpoint.kind + "-" + re.sub(r"[^A-Za-z0-9.]+", "_", where.netloc + where.path).strip("_")
    )


class LivePush:
    """Listens to ``src``'s batches; ``tick`` cuts an interval when it is due, ``close`` the
    last (part) one and stops the sender (see ``Sender.close``)."""

    def __init__(self, src: LiveSource, opts: PushOptions, sender: Sender | None = None) -> None:
        self.session = src.session
        self.opts = opts
        self.host = socket.gethostname()
        #: one service for a target and its children; None (``watch --match``): each process's
        self.service = opts.service or (
            service_name(self.session.target.cmdline) if self.session.target.pid else None
        )
        if sender is None:
            spool = None
            if opts.spool_dir:
                spool = Spool(
                    os.path.join(opts.spool_dir, spool_name(opts.endpoint)), opts.spool_bytes
                )
            sender = Sender(opts.endpoint, spool)
        self.sender = sender
        self._profiles: dict[int, CpuProfile] = {}
        self._spans: dict[int, list[float]] = {}
        self._failing: str | None = None  # what the last warnings() saw
        self.intervals = 0  # requests made
        self._next_cut = time.monotonic() + opts.interval_s
        src.listeners.append(self._batch)

    # -- windows in -------------------------------------------------------------------------
    def _batch(self, batch: list[Event]) -> None:
        for ev in batch:
            if isinstance(ev, SampleWindow) and not ev.idle:
                self._add(ev)

    def _add(self, w: SampleWindow) -> None:
        s = self.session
        main = s.target.pid or 0
        by_pid: dict[int, set[int]] = {}
        for tid, _sid, _n in w.counts:
            by_pid.setdefault(s.thread_pid.get(tid) or main, set()).add(tid)
        for pid, tids in by_pid.items():
            prof = self._profiles.get(pid)
            if prof is None:
                proc = s.processes.get(pid)
                cmd = proc.cmdline if proc is not None else s.target.cmdline
                prof = self._profiles[pid] = CpuProfile(w.rate_hz, program_name(cmd))
                self._spans[pid] = [w.t_start, w.t_end]
            prof.add_window(
                w, s.symbols.frames, s.symbols.stacks, s.classifier.stage_of, self._thread_of,
                None, tids if len(by_pid) > 1 else None,
            )  # fmt: skip
            span = self._spans[pid]
            span[0], span[1] = min(span[0], w.t_start), max(span[1], w.t_end)

    def _service_of(self, pid: int) -> str:
        proc = self.session.processes.get(pid)
        return service_name(proc.cmdline if proc is not None else None)

    def _thread_of(self, tid: int) -> str:
        """The thread's name alone (not its tid, as the export has it): a backend that makes
        series of sample labels gets as many as the service has thread names, not threads."""
        return self.session.threads.get(tid) or "unnamed"

    # -- intervals out ----------------------------------------------------------------------
    def tick(self) -> None:
        now = time.monotonic()
        if now >= self._next_cut:
            self.cut()
            self._next_cut = max(self._next_cut + self.opts.interval_s, now + 0.5)

    def cut(self) -> None:
        """The interval so far, as one request (one series per process); nothing if no sample
        came (an idle target pushes nothing, as a backend expects)."""
        series = []
        for pid, prof in self._profiles.items():
            if not prof.samples:
                continue
            t0, t1 = self._spans[pid]
            n = prof.windows
            comment = f"infertop {__version__}: CPU samples of pid {pid}, {n} {plural(n, 'window')}"
            body = prof.encode(t0, t1, [comment])
            service = self.service or self._service_of(pid)
            series.append(Series(series_labels(service, self.host, pid, self.opts.labels), body))
        self._profiles, self._spans = {}, {}
        if series:
            self.sender.submit(encode(self.opts.endpoint.kind, series))
            self.intervals += 1

    def close(self, deadline_s: float = 5.0) -> None:
        self.cut()
        self.sender.close(deadline_s)

    # -- what the status line says ----------------------------------------------------------
    def warnings(self) -> list[str]:
        """The sender's warnings, and one line each time the backend stops and starts answering
        (a log under systemd shows the outage without the status line)."""
        out = self.sender.warnings()
        failing = self.sender.stats.failing
        url = self.opts.endpoint.url
        if failing is not None and self._failing is None:
            where = "wait in the spool" if self.sender.spool is not None else "wait in memory"
            out.append(f"infertop push: {url} does not answer ({failing}); profiles {where} "
                       "and are sent when it does")  # fmt: skip
        elif failing is None and self._failing is not None:
            out.append(f"infertop push: {url} answers again")
        self._failing = failing
        return out

    def status(self) -> str:
        st = self.sender.stats
        parts = [f"pushed {st.sent} ({_kib(st.sent_bytes)})"]
        if st.failing is not None:
            left = max(0.0, st.retry_at - time.monotonic())
            parts.append(f"push failing ({st.failing}), retry in {left:.0f} s")
        queued, spooled = self.sender.queued, self.sender.spooled
        if queued:
            parts.append(f"{queued} queued")
        if spooled:
            parts.append(f"{spooled} spooled")
        if st.dropped:
            parts.append(f"{st.dropped} dropped")
        return ", ".join(parts)

    def progress(self) -> dict[str, object]:
        """What ``status`` says, for ``--json``."""
        st = self.sender.stats
        spool = self.sender.spool
        return {
            "url": self.opts.endpoint.url,
            "intervals": self.intervals,
            "sent": st.sent,
            "sent_bytes": st.sent_bytes,
            "queued": self.sender.queued,
            "spooled": self.sender.spooled,
            "spool": spool.folder if spool is not None else None,
            "dropped": st.dropped,
            "rejected": st.rejected,
            "failing": st.failing,
            "retry_in_s": round(max(0.0, st.retry_at - time.monotonic()), 1)
            if st.failing is not None
            else None,
        }

    def summary(self) -> str:
        """The last line: what was sent, and what was not and where it is."""
        st = self.sender.stats
        line = (
            f"pushed {st.sent} of {self.intervals} profiles ({_kib(st.sent_bytes)}) "
            f"to {self.opts.endpoint.url}"
        )
        if st.dropped:
            why = f"{st.rejected} refused by the backend" if st.rejected else "queue and spool full"
            line += f"; {st.dropped} dropped ({why})"
        spool = self.sender.spool
        if spool is not None and len(spool):
            line += (
                f"; {len(spool)} kept in {spool.folder} ({_kib(spool.bytes)}), sent by the next "
                "--push with this spool once the backend answers"
            )
        return line


def _kib(n: float) -> str:
    return f"{n / 1024:.0f} KiB" if n < MIB else f"{n / MIB:.1f} MiB"
