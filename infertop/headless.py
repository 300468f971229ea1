"""``infertop record``: the live collection without a UI, with a progress line on stderr."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

from infertop.collect.base import Collector
from infertop.config import Config
from infertop.errors import EXIT_OK, InfertopError
from infertop.model.events import CollectorStatus, TargetInfo
from infertop.push.live import LivePush, PushOptions
from infertop.sources import LiveSource
from infertop.words import plural


def _size(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MiB"


def record_headless(
    target: TargetInfo,
    config: Config,
    path: str,
    duration: float | None,
    collectors: Sequence[Collector] | None = None,
    statuses: Sequence[CollectorStatus] = (),
    push: PushOptions | None = None,
    as_json: bool = False,
) -> int:
    """``record``: ``--json`` puts the progress and the end on stderr as JSON lines."""
    src = LiveSource(target, config, collectors=collectors, record_path=path, statuses=statuses)
    pusher = LivePush(src, push) if push is not None else None
    tty = sys.stderr.isatty() and not as_json
    started = time.monotonic()
    last_line = 0.0
    reason = "stopped"
    src.start()
    try:
        while True:
            src.pump()
            elapsed = time.monotonic() - started
            samples = src.session.samples
            size = src.writer.bytes_written if src.writer else 0
            procs = len(src.session.processes)  # --children
            line = (
                f"recording pid {target.pid} → {path}: {elapsed:5.1f}"
                + (f"/{duration:g}" if duration else "")
                + f" s, {samples} {plural(samples, 'sample')}, {_size(size)}"
                + (f", {procs} {plural(procs, 'process')}" if procs else "")
            )
            if pusher is not None:
                pusher.tick()
                line += ", " + pusher.status()
                for warning in pusher.warnings():
                    say(("\n" if tty else "") + warning, as_json, "warning")
            if as_json:
                if elapsed - last_line >= 5.0 or last_line == 0.0:
                    doc = {"elapsed_s": round(elapsed, 1), "samples": samples, "bytes": size,
                           "path": path}  # fmt: skip
                    if pusher is not None:
                        doc["push"] = pusher.progress()
                    say(doc, True)
                    last_line = elapsed or 1e-9
            elif tty:
                sys.stderr.write("\r" + line + "   ")
                sys.stderr.flush()
            elif elapsed - last_line >= 5.0 or last_line == 0.0:
                print(line, file=sys.stderr, flush=True)
                last_line = elapsed or 1e-9
            if src.writer is not None and src.writer.failed:
                raise InfertopError(
                    src.writer.failed, "free disk space; what was written is readable"
                )
            if src.done:
                reason = "the target exited"
                break
            if duration is not None and elapsed >= duration:
                reason = "duration reached"
                break
            time.sleep(0.25)
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        src.stop()
        if pusher is not None:
            pusher.close()
    if tty:
        sys.stderr.write("\n")
    samples = src.session.samples
    procs = len(src.session.processes)  # --children
    if pusher is not None:
        for warning in pusher.warnings():
            say(warning, as_json, "warning")
    if as_json:
        doc = {"end": reason, "path": path, "windows": src.session.window_count,
               "samples": samples, "processes": procs}  # fmt: skip
        if pusher is not None:
            doc["push"] = pusher.progress()
        say(doc, True)
        return EXIT_OK
    print(
        f"wrote {path}: {src.session.window_count} {plural(src.session.window_count, 'window')}, "
        f"{samples} {plural(samples, 'sample')}"
        + (f", {procs} {plural(procs, 'process')}" if procs else "")
        + f" ({reason})",
        file=sys.stderr,
    )
    if pusher is not None:
        print(pusher.summary(), file=sys.stderr)
    return EXIT_OK


def say(what: str | dict, as_json: bool, key: str = "message") -> None:
    """One line on stderr: ``what`` as it is, or with ``--json`` as a JSON object (a text is
    ``{key: text}``)."""
    if as_json:
        what = json.dumps(what if isinstance(what, dict) else {key: what.strip()})
    print(what, file=sys.stderr, flush=True)
