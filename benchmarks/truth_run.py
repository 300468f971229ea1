"""A target's own ground truth beside an ``infertop record`` of it, for ``make accuracy``.

The samples (and the test targets) write the seconds they spent in each stage to a truth file
every 0.05 s; ``record_beside_truth`` reads it over exactly the time py-spy sampled, so that
ours and the truth cover the same seconds. ``OtherLoad`` measures the CPU other processes took
meanwhile: the table prints it beside each row, the way to read a row's error. Nothing here
is a test: the accuracy is a benchmark's numbers, not a pass/fail bar (docs/performance.md).
"""

from __future__ import annotations

import itertools
import os
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from infertop.analysis.stages import StageClassifier
from infertop.collect.pyspy import parse_raw
from infertop.model.events import SampleWindow
from infertop.record.reader import read_recording
from tests.integration.helpers import infertop, read_truth, start_target, stop_target


@dataclass
class TruthRun:
    """One target's run: the truth's seconds by stage over what ``infertop record`` sampled,
    the recording, and (``with_pyspy``) raw py-spy's sample counts by stage over a window of
    its own right after, with the truth's seconds over that window; the CPU other processes
    took (cores) over each."""

    spent: dict[str, float]
    out: str
    load_cores: float
    pyspy: dict[str, int] = field(default_factory=dict)
    pyspy_spent: dict[str, float] = field(default_factory=dict)
    pyspy_load_cores: float = 0.0


def record_beside_truth(
    folder: Path, argv: list[str], duration: str, rate: str, wall_only: bool = False,
    python: str | None = None, with_pyspy: bool = True,
) -> TruthRun:
    """Start the target with its ground truth, record it with the defaults but for the rate and
    duration; the truth's seconds by stage over the time py-spy sampled (its wall windows only,
    with ``wall_only``).

    The truth is taken over exactly the time sampled, not over the whole ``record`` command:
    attaching (the agent's injection stops the target for a moment, longer on a busy machine)
    adds its seconds to whichever stage was running then. The CPU windows' blocking samples
    stop every thread of the target, and a stage that runs on many native threads (the Rust
    tokenizer) is slowed by them most, so ``wall_only`` compares the wall view with the truth
    of the wall windows, where the target runs unstopped."""
    truth_path = str(folder / "truth.json")
    env = {**os.environ, "SAMPLES_TRUTH_INTERVAL_S": "0.05"}
    target = start_target([*argv, "--truth", truth_path], python=python, env=env)
    load = OtherLoad()
    try:
        settled_truth(truth_path)
        series = TruthSeries(truth_path)
        out = str(folder / "s.infertop")
        with series:
            load.start(target.pid)
            p = infertop("record", str(target.pid), "-o", out, "--duration", duration, "--rate", rate,
                         timeout=int(float(duration)) + 120)  # fmt: skip
            load.stop()
            if p.returncode != 0:
                raise RuntimeError(f"infertop record failed: {p.stderr.strip()}")
            windows = [e for e in read_recording(out).events if isinstance(e, SampleWindow)]
            if not windows:
                raise RuntimeError(f"no sample window in {out}")
            series.wait_past(windows[-1].t_end)
            run = TruthRun(_spent(series, _spans(windows, wall_only)), out, load.cores)
            if with_pyspy:
                _raw_pyspy(run, series, target.pid, duration, rate)
        if target.poll() is not None:
            raise RuntimeError("the target exited while it was recorded")
    finally:
        stop_target(target)
    return run


def _spans(windows: list[SampleWindow], wall_only: bool) -> list[tuple[float, float]]:
    if wall_only:
        return [(w.t_start, w.t_end) for w in windows if w.idle]
    return [(windows[0].t_start, windows[-1].t_end)]


def _spent(series: TruthSeries, spans: list[tuple[float, float]]) -> dict[str, float]:
    spent: dict[str, float] = {}
    for t0, t1 in spans:
        a, b = series.at(t0), series.at(t1)
        for stage, v in b.items():
            spent[stage] = spent.get(stage, 0.0) + v - a.get(stage, 0.0)
    return spent


def _raw_pyspy(run: TruthRun, series: TruthSeries, pid: int, duration: str, rate: str) -> None:
    """Raw py-spy on the same target, as a user would run it (``record --format raw``, its
    defaults otherwise: blocking, the running threads' samples), its stacks classified with
    infertop's default stage rules (``--full-filenames``: the paths the rules match): what
    py-spy alone tells of the stages, without the wall view, the agent or its timed calls."""
    out = Path(run.out).with_suffix(".pyspy.txt")
    load = OtherLoad()
    load.start(pid)
    t0 = time.time()
    p = subprocess.run(
        [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--rate", rate,
         "--duration", duration, "--format", "raw", "--threads", "--full-filenames", "--output", str(out)],
        capture_output=True, text=True, timeout=int(float(duration)) + 60,
    )  # fmt: skip
    t1 = time.time()
    load.stop()
    if p.returncode != 0:
        raise RuntimeError(f"py-spy record failed: {p.stderr.strip()}")
    series.wait_past(t1)
    rows, _bad = parse_raw(out.read_text())
    classifier = StageClassifier()
    for _tid, _name, frames, count in rows:
        stage = classifier.classify(frames)[0]
        run.pyspy[stage] = run.pyspy.get(stage, 0) + count
    run.pyspy_spent = _spent(series, [(t0, t1)])
    run.pyspy_load_cores = load.cores


#: other processes' CPU (cores, averaged over a recording) above which a row is marked busy:
#: py-spy's ticks come late while the target's threads and other work hold the cores
#: (docs/performance.md, "Late ticks"; ``[collect] realtime = true`` is the remedy)
BUSY_CORES = 0.3


class OtherLoad:
    """The CPU that processes other than the target, this benchmark and its children (``infertop
    record`` and the py-spy it reaps) took while a recording ran, in cores: the whole machine's
    busy time from /proc/stat less theirs."""

    cores = 0.0

    @property
    def busy(self) -> bool:
        return self.cores > BUSY_CORES

    def start(self, pid: int) -> None:
        self.pid = pid
        self.t0, self.busy0, self.ours0 = time.monotonic(), machine_busy_s(), self._ours()

    def stop(self) -> None:
        wall = time.monotonic() - self.t0
        others = (machine_busy_s() - self.busy0) - (self._ours() - self.ours0)
        self.cores = max(0.0, others / wall) if wall > 0 else 0.0

    def _ours(self) -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(f"/proc/{self.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        target = (int(fields[11]) + int(fields[12])) / TICK  # utime, stime: every thread
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + target


TICK = os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    with open("/proc/stat") as fh:
        cpu = fh.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in cpu[:8])
    return (user + nice + system + irq + softirq + steal) / TICK


class TruthSeries:
    """The target's truth file read over and over while a recording runs: its cumulative stage
    seconds at any instant in between, interpolated between the two snapshots around it (the
    target rewrites the file every 0.05 s here)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.snapshots: list[tuple[float, dict[str, float]]] = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> Self:
        self._take()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(timeout=5.0)

    def _take(self) -> None:
        truth = read_truth(self.path)
        if not self.snapshots or truth["written"] > self.snapshots[-1][0]:
            self.snapshots.append((truth["written"], truth["stages"]))

    def _poll(self) -> None:
        while not self._halt.wait(0.05):
            self._take()

    def wait_past(self, t: float, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not (self.snapshots and self.snapshots[-1][0] >= t):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the truth file was not rewritten after {t}")
            time.sleep(0.05)

    def at(self, t: float) -> dict[str, float]:
        snaps = self.snapshots
        if not snaps[0][0] <= t <= snaps[-1][0]:
            raise RuntimeError(f"the truth file has no reading around {t}")
        for (ta, a), (tb, b) in itertools.pairwise(snaps):
            if ta <= t <= tb:
                f = (t - ta) / (tb - ta) if tb > ta else 0.0
                return {s: a.get(s, 0.0) + f * (b.get(s, 0.0) - a.get(s, 0.0)) for s in b}
        return dict(snaps[-1][1])


def settled_truth(path: str, timeout: float = 60.0) -> None:
    """Wait until the target has served for a while (vocabulary trained, model warm)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            truth = read_truth(path)
        except AssertionError:
            truth = {}
        if truth and sum(truth.get("stages", {}).values()) > 1.0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the target served nothing for {timeout} s ({path})")
