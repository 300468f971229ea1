"""Ground-truth stage accounting for the sample workloads.

Each sample wraps exactly the work of a stage in ``with clock.stage("forward"): ...``; the
clock adds the ``time.perf_counter()`` elapsed time to that stage's running total. Totals are
cumulative since the clock was made and are written as JSON, atomically, to ``--truth FILE``::

    {"pid": 123, "started": 1700000000.0, "written": 1700000012.5, "requests": 840,
     "stages": {"preprocess": 1.2, "forward": 6.1, "postprocess": 0.9, "serialize": 0.8,
                "queue": 0.4}}

The frames of this module are deliberately trivial (two clock reads and one locked addition
per span) so that they never show up as a stage of their own when the process is sampled,
and their names avoid every word the stage rules look for.
"""

from __future__ import annotations

import json
import os
import threading
import time

STAGES = ("preprocess", "forward", "postprocess", "serialize", "queue")


class _Span:
    """Context manager for one timed span; reusable, but not re-entrant."""

    __slots__ = ("_clock", "_name", "_t0")

    def __init__(self, clock: StageClock, name: str) -> None:
        self._clock = clock
        self._name = name
        self._t0 = 0.0

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self._clock.add(self._name, time.perf_counter() - self._t0)


class StageClock:
    """Thread-safe per-stage wall-time totals plus a completed-request counter."""

    def __init__(self, stages: tuple[str, ...] = STAGES) -> None:
        self.started = time.time()
        self._lock = threading.Lock()
        self._totals = dict.fromkeys(stages, 0.0)
        self._requests = 0
        self._calls: dict[str, list[dict]] = {}
        self._flusher: threading.Thread | None = None
        self._halt = threading.Event()

    def stage(self, name: str) -> _Span:
        """``with clock.stage("preprocess"): ...`` adds the block's elapsed time to ``name``."""
        return _Span(self, name)

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self._totals[name] = self._totals.get(name, 0.0) + seconds

    def count(self, n: int = 1) -> None:
        """Record ``n`` completed requests."""
        with self._lock:
            self._requests += n

    def call(self, kind: str, row: dict, keep: int = 5000) -> None:
        """Record one call of ``kind`` (a generation's own timings, say); the newest ``keep``
        of each kind are written."""
        with self._lock:
            rows = self._calls.setdefault(kind, [])
            rows.append(row)
            if len(rows) > keep:
                del rows[: len(rows) - keep]

    @property
    def requests(self) -> int:
        return self._requests

    def snapshot(self) -> dict:
        with self._lock:
            totals = dict(self._totals)
            requests = self._requests
            calls = {k: list(v) for k, v in self._calls.items()}
        extra = {"calls": calls} if calls else {}
        return {
            **extra,
            "pid": os.getpid(),
            "started": self.started,
            "written": time.time(),
            "requests": requests,
            "stages": totals,
        }

    def write(self, path: str) -> None:
        """Write the snapshot to ``path`` atomically (temp file in the same folder + rename)."""
        text = json.dumps(self.snapshot())
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)

    def start_flusher(self, path: str, interval: float | None = None) -> None:
        """Rewrite ``path`` every ``interval`` seconds from a daemon thread (default 0.5 s, or
        ``$SAMPLES_TRUTH_INTERVAL_S``: a test that needs the truth of each second sets 0.05)."""
        if interval is None:
            interval = float(os.environ.get("SAMPLES_TRUTH_INTERVAL_S", "0.5"))

        def run() -> None:
            while not self._halt.wait(interval):
                try:
                    self.write(path)
                except OSError:
                    pass  # e.g. the folder went away; the final write reports nothing either

        self._flusher = threading.Thread(target=run, name="truth-writer", daemon=True)
        self._flusher.start()

    def close(self, path: str | None) -> None:
        """Stop the flusher and, when ``path`` is given, write the totals one last time."""
        self._halt.set()
        if self._flusher is not None:
            self._flusher.join(timeout=2.0)
        if path:
            try:
                self.write(path)
            except OSError:
                pass
