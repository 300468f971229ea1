"""infertop's stage shares against each sample's own ground truth, with real py-spy.

Both sides are compared as shares of the four work stages (preprocess, forward,
postprocess, serialize): the truth knows nothing about time outside them (client threads
waiting, the batcher's own loop), and py-spy's blocked-but-sampled client threads land in
``queue``. That the remainder is small is checked separately.

A stage's sample count is Poisson (py-spy samples at random intervals), so its share carries a
sampling error of about sqrt(share / samples): at the default 50 Hz for 8 s the textgen forward
stage (a quarter of ~400 samples) is off by 0.03 (1 sigma), and a 0.078 miss of the 0.07
tolerance happened on CI. The check is of the attribution, not of the rate, so it records 1,200
samples (100 Hz, 12 s): sigma ~0.015, measured errors within 0.026 over repeated runs under load.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import threading
import time
from typing import Self

import pytest

from infertop.model.events import GenerationCall, SampleWindow
from infertop.record.reader import read_recording
from tests.support.generation_truth import check_against_own

from .helpers import VENV312, infertop, read_truth, report_json, start_target, stop_target

# solo: the 3-point accuracy holds for the sample alone on its cores, not beside another test
pytestmark = [pytest.mark.slow, pytest.mark.solo]
WORK = ("preprocess", "forward", "postprocess", "serialize")
TOLERANCE = 0.07
RATE, DURATION = "100", "12"  # ~1,200 samples: the tolerance is ~5 sigma of the sampling error
#: where other processes took CPU: the whole window is compared (CPU windows too, whose
#: blocking samples stop every thread, the Rust tokenizer's pool most), and beside two CPU hogs
#: textgen --fast-tokenizer's forward read 69.9 % against the truth's 61.2 % in a fresh-clone
#: run (2026-12-06; that case is the wall test's now); in three more runs there the stages
#: missed by 0.3-6.5 points, quiet 0.1-2.4
BUSY_CPU_TOLERANCE = 0.10


def _norm(d: dict[str, float]) -> dict[str, float]:
    total = sum(d.get(s, 0.0) for s in WORK)
    return {s: d.get(s, 0.0) / total for s in WORK}


@pytest.mark.parametrize(
    "sample,args,dominant",
    [
        ("textgen_service", [], "forward"),
        ("textgen_service", ["--slow-tokenizer"], "preprocess"),
        # (the Rust tokenizer, --fast-tokenizer, is the wall test's below: 4 points of the truth
        # over the wall windows, a yardstick that attaching and the CPU windows' blocking samples
        # do not move, where this one's whole span missed by 8.7 points beside two CPU hogs)
        ("copy_heavy", [], "forward"),
        ("python_loop", [], "forward"),
    ],
)
def test_stage_shares_match_ground_truth(tmp_path, sample: str, args: list[str], dominant: str) -> None:
    load = _OtherLoad()
    spent, out = _record_beside_truth(tmp_path, ["-m", f"samples.{sample}", *args], DURATION, RATE, load=load)
    truth = _norm(spent)
    rep = report_json(out)
    ours_all = {s["name"]: s["share"] for s in rep["stages"]}
    ours = _norm(ours_all)
    tolerance = load.tolerance(TOLERANCE, BUSY_CPU_TOLERANCE)
    print(f"other processes took {load.cores:.2f} cores: tolerance {tolerance:.2f}; ours {ours}, truth {truth}")
    for stage in ("preprocess", "forward", "serialize"):
        assert ours[stage] == pytest.approx(truth[stage], abs=tolerance), (stage, ours, truth, load.cores)
    assert max(ours, key=ours.__getitem__) == dominant
    # what the four stages leave out stays small, apart from the textgen clients' queue waits
    assert ours_all.get("other", 0.0) < 0.15, ours_all
    # the hottest frames point into the sample's own code or torch
    assert any("samples" in f["file"] or "torch" in f["file"] for f in rep["top_frames"][:5])
    # the finding a user gets from that share (docs/findings.md): the tokenizer made slow on
    # purpose is preprocess-hot; the service as shipped (its preprocess ~17 % against the
    # rule's 25 %; 28 % beside three other tests and two CPU hogs, hence solo) is not
    if sample == "textgen_service" and args in ([], ["--slow-tokenizer"]):
        rules = {f["rule"] for f in rep["findings"]}
        assert ("preprocess-hot" in rules) == bool(args), rep["findings"]


# -- wall time with native code off the Python thread -----------------------------------------
#: the wall view's stages on the pipeline thread against perf_counter around them, ~3,000 wall
#: samples (200 Hz, 30 s, every other window a wall window): a share's Poisson error is at most
#: 0.009 (1 sigma), but py-spy's ticks are regular and so are these loops, and whole runs have
#: missed by up to 3.4 points on a quiet machine (docs/performance.md): each case says its bar
WALL_RATE, WALL_DURATION = "200", "30"


@pytest.mark.parametrize(
    "args,stages,other_max,cpu_gap,tolerance",
    [
        # the Hugging Face fast tokenizer (Rust, parallel) and multi-threaded zstd in serialize,
        # a BertModel between them; a helper thread that only sleeps and writes a file
        # (forward read 73.8 % against 70.8 % once on a quiet machine, 2026-12-02: 4 points)
        (["tests/integration/targets/embed_loop.py", "--compress"], ("preprocess", "forward", "serialize"), 0.04, 0.03, 0.04),
        # the bundled service with the Rust tokenizer: a batcher thread between client threads
        # (its other: the batcher's own work between stages, waking the clients: ~3 %); its
        # encode is short, and on a busy machine the CPU view, whose shares are of every
        # thread's active samples, the clients' too, had as much of it as the wall view. Its
        # pool and torch's threads fill both cores, py-spy's ticks come late and land in the
        # stage after: forward +2.1 to +4.0 points in quiet runs here, +4.8 on CI, preprocess
        # and queue low (docs/performance.md, "Late ticks"): 5 points
        (["-m", "samples.textgen_service", "--fast-tokenizer"], ("preprocess", "queue", "forward", "postprocess", "serialize"), 0.06, None, 0.05),
    ],
    ids=["embed_loop", "textgen_fast_tokenizer"],
)
def test_wall_shares_match_ground_truth_with_native_code(
    tmp_path, args: list[str], stages: tuple[str, ...], other_max: float, cpu_gap: float | None,
    tolerance: float,
) -> None:
    load = _OtherLoad()
    spent, out = _record_beside_truth(tmp_path, args, WALL_DURATION, WALL_RATE, wall_only=True, load=load)
    if load.busy:
        # other work took CPU from the target and py-spy alike (CI's machine, a developer's
        # laptop): py-spy's ticks come late, more so while the stage on a native thread pool
        # holds both cores; measured under two CPU hogs on 2 cores (docs/performance.md).
        # The CPU view's shortfall on the GIL-released encode shrinks there too: 12.6 % against
        # the wall's 15.5 % under two hogs, 4.6 % against 12.3 % on a quiet machine, and it can
        # turn: the embedding loop's encode read 14.6 % in the CPU view against the wall's 13.6 %
        # (truth 14.3 %) with 1.36 cores taken (2026-12-07), where every thread waiting for a
        # CPU is active. So the gap is a quiet machine's claim only
        tolerance = max(tolerance, BUSY_TOLERANCE)
        cpu_gap = None
    print(f"other processes took {load.cores:.2f} cores: tolerance {tolerance:.2f}")
    truth = {s: spent.get(s, 0.0) / sum(spent.get(x, 0.0) for x in stages) for s in stages}
    rep = report_json(out)
    assert rep["infertop_report"] == 2 and rep["sampling"]["views"] == ["wall", "cpu"]
    wall = {s["name"]: s["share"] for s in rep["stages"]}
    cpu = {s["name"]: s["cpu_share"] for s in rep["stages"]}
    ours = {s: wall.get(s, 0.0) / sum(wall.get(x, 0.0) for x in stages) for s in stages}
    print("stage      ours   truth  (wall, CPU view: shares of all samples)")
    for stage in stages:
        both = f"({wall.get(stage, 0.0):.3f}, {cpu.get(stage, 0.0):.3f})"
        print(f"{stage:<10} {ours[stage]:.3f}  {truth[stage]:.3f}  {both}")
    print(f"other      wall {wall.get('other', 0.0):.3f} (at most {other_max})")
    for stage in stages:
        assert ours[stage] == pytest.approx(truth[stage], abs=tolerance), (stage, ours, truth, cpu)
    # the stages are nearly all of the pipeline thread's wall time: the sleeping helper and the
    # waiting clients add nothing to other (in the CPU view, the helper's few active samples
    # and the agent's thread are there)
    assert wall.get("other", 0.0) < other_max, wall
    # the tokenizer's encode runs with the GIL released: the CPU view sees only part of it
    if cpu_gap is not None:
        assert cpu["preprocess"] < wall["preprocess"] - cpu_gap, (cpu, wall)


# -- a generation call: prefill and decode ------------------------------------------------------
GENERATION = ("preprocess", "prefill", "decode", "postprocess", "serialize")


def test_hugging_face_generate_splits_into_prefill_and_decode(tmp_path) -> None:
    """Real ``generate`` (a random-weight GPT-2, KV cache on, batches of up to 8): its samples
    under ``_prefill`` (and generate's set-up) are prefill, those of the ``_sample`` loop decode,
    the model's forward inside each included; against the sample's truth (prefill until the
    first new token is chosen, by a streamer). Ours ends the prefill a token's selection
    earlier than the truth, one step in --new-tokens: a bias that grows where that Python
    step is slowed most, on a machine short of CPU (prefill 23.7 % against the truth's 28.8 %
    in a fresh-clone run beside two CPU hogs, 2026-12-04)."""
    load = _OtherLoad()
    spent, out = _record_beside_truth(
        tmp_path, ["-m", "samples.textgen_service", "--hf"], "20", "100", wall_only=True, load=load
    )
    tolerance = load.tolerance(0.05, 0.07)
    truth = {s: spent.get(s, 0.0) / sum(spent.get(x, 0.0) for x in GENERATION) for s in GENERATION}
    rep = report_json(out)
    wall = {s["name"]: s["share"] for s in rep["stages"]}
    ours = {s: wall.get(s, 0.0) / sum(wall.get(x, 0.0) for x in GENERATION) for s in GENERATION}
    print(f"prefill {ours['prefill']:.3f} (truth {truth['prefill']:.3f}), decode {ours['decode']:.3f} (truth {truth['decode']:.3f})")
    for stage in ("prefill", "decode"):
        assert ours[stage] == pytest.approx(truth[stage], abs=tolerance), (stage, ours, truth,
                                                                           load.cores)
    # the model's own forward is inside them: no separate forward stage in a generation
    assert wall.get("forward", 0.0) < 0.05, wall
    assert {"prefill", "decode"} <= {s["name"] for s in rep["stages"]}


def test_generation_calls_match_the_service_s_own_timing_on_312(tmp_path) -> None:
    """Real ``generate`` on Python 3.12 (torch and transformers in .venv312), dynamic batches of
    2-8 from 8 clients, attached with the defaults: per call the agent's TTFT and TPOT p50
    within 15 % of the service's own (a streamer's first token), the batch sizes' p50 and max
    exact, the KV cache's largest within 10 % of its size from the model's shape; prefill and
    decode as wall shares within 5 points of the truth, 7 where other processes took CPU, as
    its Hugging Face sibling above: ours ends the prefill a token's selection early (prefill
    30.2 % against the truth's 33.3 % on a quiet machine, 29.1 % against 32.8 % in a
    fresh-clone run beside two CPU hogs, 2026-12-06, its TTFT and TPOT within 0.3 % all the
    same)."""
    if not VENV312.exists():
        pytest.skip(f"needs {VENV312} (make .venv312/.installed: Python 3.12 with torch, transformers)")
    load = _OtherLoad()
    spent, out = _record_beside_truth(
        tmp_path, ["samples/textgen_service.py", "--hf", "--clients", "8", "--rate", "6"], "20", "100",
        wall_only=True, python=str(VENV312), load=load,
    )  # fmt: skip
    tolerance = load.tolerance(0.05, 0.07)
    rep = report_json(out)
    g = rep["generation"]
    assert g is not None and g["calls"] >= 40, g
    calls = [e for e in read_recording(out).events if isinstance(e, GenerationCall)]
    with open(tmp_path / "truth.json") as fh:
        check_against_own("textgen --hf on 3.12", g, calls, json.load(fh)["calls"]["generation"])
    truth = {s: spent.get(s, 0.0) / sum(spent.get(x, 0.0) for x in GENERATION) for s in GENERATION}
    wall = {s["name"]: s["share"] for s in rep["stages"]}
    ours = {s: wall.get(s, 0.0) / sum(wall.get(x, 0.0) for x in GENERATION) for s in GENERATION}
    print(f"prefill {ours['prefill']:.3f} (truth {truth['prefill']:.3f}), decode {ours['decode']:.3f} (truth {truth['decode']:.3f})")
    for stage in ("prefill", "decode"):
        assert ours[stage] == pytest.approx(truth[stage], abs=tolerance), (stage, ours, truth,
                                                                           load.cores)


def _record_beside_truth(
    tmp_path, argv: list[str], duration: str, rate: str, wall_only: bool = False,
    load: _OtherLoad | None = None, python: str | None = None,
) -> tuple[dict[str, float], str]:
    """Start the target with its ground truth, record it with the defaults but for the rate and
    duration; return the truth's seconds by stage over the time py-spy sampled (its wall
    windows only, with ``wall_only``) and the recording's path.

    The truth is taken over exactly the time sampled, not over the whole ``record`` command:
    attaching (the agent's injection stops the target for a moment, longer on a busy machine)
    adds its seconds to whichever stage was running then, 3 points of forward on CI. The CPU
    windows' blocking samples stop every thread of the target, and a stage that runs on many
    native threads (the Rust tokenizer) is slowed by them most: under load at 200 Hz textgen's
    preprocess took 10 % of the truth in a recording with CPU windows and 8 % in one without.
    The wall view is of the target as it runs between those stops, so ``wall_only`` compares it
    with the truth of the wall windows."""
    truth_path = str(tmp_path / "truth.json")
    env = {**os.environ, "SAMPLES_TRUTH_INTERVAL_S": "0.05"}
    target = start_target([*argv, "--truth", truth_path], python=python, env=env)
    try:
        _settled_truth(truth_path)
        series = _TruthSeries(truth_path)
        out = str(tmp_path / "s.infertop")
        with series:
            if load is not None:
                load.start(target.pid)
            p = infertop("record", str(target.pid), "-o", out, "--duration", duration, "--rate", rate)
            if load is not None:
                load.stop()
            assert p.returncode == 0, p.stderr
            windows = [e for e in read_recording(out).events if isinstance(e, SampleWindow)]
            assert windows, f"no sample window in {out}"
            series.wait_past(windows[-1].t_end)
        assert target.poll() is None, "the target must still be running"
    finally:
        _, err = stop_target(target)
    assert err == "", "nothing may reach the target's stderr"
    if wall_only:
        spans = [(w.t_start, w.t_end) for w in windows if w.idle]
    else:
        spans = [(windows[0].t_start, windows[-1].t_end)]
    spent: dict[str, float] = {}
    for t0, t1 in spans:
        a, b = series.at(t0), series.at(t1)
        for stage, v in b.items():
            spent[stage] = spent.get(stage, 0.0) + v - a.get(stage, 0.0)
    return spent, out


#: other processes' CPU (cores, averaged over the recording) above which the machine counts as
#: busy, and the wall view's tolerance then: under two CPU hogs on the 2 cores the embedding
#: loop's forward read 0.2-2.6 points low in 15 runs, py-spy's ticks late while torch's
#: threads and the hogs hold the cores, and 5.9 low in one under-load run of the suite
#: (2026-12-07; docs/performance.md); ``[collect] realtime = true`` is the remedy
BUSY_CORES = 0.3
BUSY_TOLERANCE = 0.07


class _OtherLoad:
    """The CPU that processes other than the target, this test and its children (``infertop
    record`` and the py-spy it reaps) took while a recording ran, in cores: the whole machine's
    busy time from /proc/stat less theirs."""

    cores = 0.0

    @property
    def busy(self) -> bool:
        return self.cores > BUSY_CORES

    def tolerance(self, quiet: float, busy: float) -> float:
        """A test's bar: ``quiet`` on a machine to itself, ``busy`` where others took CPU."""
        return busy if self.busy else quiet

    def start(self, pid: int) -> None:
        self.pid = pid
        self.t0, self.busy0, self.ours0 = time.monotonic(), _machine_busy_s(), self._ours()

    def stop(self) -> None:
        wall = time.monotonic() - self.t0
        others = (_machine_busy_s() - self.busy0) - (self._ours() - self.ours0)
        self.cores = max(0.0, others / wall) if wall > 0 else 0.0

    def _ours(self) -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(f"/proc/{self.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        target = (int(fields[11]) + int(fields[12])) / TICK  # utime, stime: every thread
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + target


TICK = os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    with open("/proc/stat") as fh:
        cpu = fh.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in cpu[:8])
    return (user + nice + system + irq + softirq + steal) / TICK


class _TruthSeries:
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

    def wait_past(self, t: float, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not (self.snapshots and self.snapshots[-1][0] >= t):
            assert time.monotonic() < deadline, f"the truth file was not rewritten after {t}"
            time.sleep(0.05)

    def at(self, t: float) -> dict[str, float]:
        snaps = self.snapshots
        assert snaps[0][0] <= t <= snaps[-1][0], (t, snaps[0][0], snaps[-1][0])
        for (ta, a), (tb, b) in itertools.pairwise(snaps):
            if ta <= t <= tb:
                f = (t - ta) / (tb - ta) if tb > ta else 0.0
                return {s: a.get(s, 0.0) + f * (b.get(s, 0.0) - a.get(s, 0.0)) for s in b}
        return dict(snaps[-1][1])


def _settled_truth(path: str, timeout: float = 60.0) -> None:
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
    raise AssertionError(f"the target served nothing for {timeout} s ({path})")
