"""How true infertop's stage shares are: ``make accuracy``.

Runs the ground-truth targets (the bundled samples, the real Hugging Face tokenizer and
``generate`` stacks, on the dev venv's Python and on 3.12 where ``.venv312`` exists), each
beside its own clock of the seconds it spent in every stage; records each with ``infertop
record`` at the defaults but for rate and duration, then runs raw py-spy on the same target for
as long, its stacks classified with infertop's default stage rules. Prints one table: target,
Python, stage, the truth's share, ours and our error, raw py-spy's and its error, and the CPU
other processes took while each ran (a busy machine makes py-spy's ticks late: read a row's
error beside it). Shares are of the target's work stages only (the truth knows nothing of
the time outside them). Generation rows add TTFT and TPOT p50 against the service's own.

Not a test and not in CI: the numbers move with the machine; docs/performance.md keeps the
latest table.

    .venv/bin/python benchmarks/accuracy.py                 # every case, ~8 min on 2 cores
    .venv/bin/python benchmarks/accuracy.py --only textgen  # the cases whose name has "textgen"
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.truth_run import BUSY_CORES, TruthRun, record_beside_truth  # noqa: E402
from infertop.model.events import GenerationCall  # noqa: E402
from infertop.record.reader import read_recording  # noqa: E402
from tests.integration.helpers import VENV312, report_json  # noqa: E402

WORK = ("preprocess", "forward", "postprocess", "serialize")
GENERATION = ("preprocess", "prefill", "decode", "postprocess", "serialize")


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    stages: tuple[str, ...]
    rate: str = "100"
    duration: str = "12"
    #: compare the wall view over the wall windows only (the target runs unstopped there):
    #: native thread pools (the Rust tokenizer, zstd) that the CPU windows' stops slow most
    wall_only: bool = False
    py312: bool = False
    #: the service writes its own generation calls (TTFT, TPOT) into the truth file
    own_calls: bool = False


CASES = (
    Case("textgen_service", ("-m", "samples.textgen_service"), WORK),
    Case("textgen --slow-tokenizer", ("-m", "samples.textgen_service", "--slow-tokenizer"), WORK),
    Case("copy_heavy", ("-m", "samples.copy_heavy"), WORK),
    Case("python_loop", ("-m", "samples.python_loop"), WORK),
    Case("embed_loop --compress", ("tests/integration/targets/embed_loop.py", "--compress"),
         ("preprocess", "forward", "serialize"), "200", "30", wall_only=True),  # fmt: skip
    Case("textgen --fast-tokenizer", ("-m", "samples.textgen_service", "--fast-tokenizer"),
         ("preprocess", "queue", "forward", "postprocess", "serialize"), "200", "30", wall_only=True),  # fmt: skip
    Case("textgen --hf", ("-m", "samples.textgen_service", "--hf"), GENERATION, "100", "20", wall_only=True),
    Case("textgen --hf (3.12)", ("samples/textgen_service.py", "--hf", "--clients", "8", "--rate", "6"),
         GENERATION, "100", "20", wall_only=True, py312=True, own_calls=True),  # fmt: skip
)


def _norm(d: dict[str, float], stages: tuple[str, ...]) -> dict[str, float]:
    total = sum(d.get(s, 0.0) for s in stages)
    return {s: (d.get(s, 0.0) / total if total else 0.0) for s in stages}


def _python_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout.strip()


def _rows(case: Case, run: TruthRun, python: str) -> list[dict]:
    truth = _norm(run.spent, case.stages)
    ours = _norm({s["name"]: s["share"] for s in report_json(run.out)["stages"]}, case.stages)
    spy_truth = _norm(run.pyspy_spent, case.stages)
    spy = _norm({k: float(v) for k, v in run.pyspy.items()}, case.stages)
    return [
        {"target": case.name, "python": python, "what": stage, "truth": truth[stage], "ours": ours[stage],
         "pyspy_truth": spy_truth[stage], "pyspy": spy[stage], "cores": run.load_cores,
         "pyspy_cores": run.pyspy_load_cores}
        for stage in case.stages
    ]  # fmt: skip


def _generation_rows(case: Case, run: TruthRun, python: str, truth_file: Path) -> list[dict]:
    """TTFT and TPOT p50 of the calls the agent timed against the service's own rows of them."""
    g = report_json(run.out)["generation"]
    calls = [e for e in read_recording(run.out).events if isinstance(e, GenerationCall)]
    if not g or not calls:
        return []
    t0, t1 = min(c.t_start for c in calls), max(c.t_end for c in calls)
    own = json.loads(truth_file.read_text())["calls"]["generation"]
    mine = [c for c in own if t0 - 0.005 <= c["t"] and c["t"] + c["total_ms"] / 1000 <= t1 + 0.005]
    rows = []
    for key in ("ttft_ms", "tpot_ms"):
        theirs = statistics.median(c[key] for c in mine if c[key] is not None)
        rows.append({"target": case.name, "python": python, "what": f"{key[:4]} p50 ms", "truth": theirs,
                     "ours": g[key]["p50"], "cores": run.load_cores})  # fmt: skip
    return rows


def _fmt_row(r: dict) -> str:
    busy = lambda c: f"{c:.2f}" + (" busy" if c > BUSY_CORES else "")  # noqa: E731
    if r["what"].endswith(" ms"):  # a time against the service's own: a relative error
        err = (r["ours"] - r["truth"]) / r["truth"] * 100 if r["truth"] else 0.0
        return (f"| {r['target']} | {r['python']} | {r['what']} | {r['truth']:.2f} | {r['ours']:.2f} | "
                f"{err:+.1f} % | | | {busy(r['cores'])} |")  # fmt: skip
    pts = lambda a, b: f"{(a - b) * 100:+.1f}"  # noqa: E731
    return (f"| {r['target']} | {r['python']} | {r['what']} | {r['truth'] * 100:.1f} % | {r['ours'] * 100:.1f} % | "
            f"{pts(r['ours'], r['truth'])} | {r['pyspy'] * 100:.1f} % (truth {r['pyspy_truth'] * 100:.1f}) | "
            f"{pts(r['pyspy'], r['pyspy_truth'])} | {busy(r['cores'])} / {busy(r['pyspy_cores'])} |")  # fmt: skip


HEADER = (
    "| target | Python | stage | truth | ours | error (points) | raw py-spy | its error | others' cores (ours / py-spy's) |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="run the cases whose name contains this text")
    ap.add_argument("--no-pyspy", action="store_true", help="skip raw py-spy's runs (half the time)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if args.only in c.name]
    if not cases:
        print(f"accuracy: no case's name contains {args.only!r}; the cases: "
              + ", ".join(c.name for c in CASES), file=sys.stderr)  # fmt: skip
        return 2
    rows: list[dict] = []
    started = time.monotonic()
    for i, case in enumerate(cases, 1):
        python = sys.executable
        if case.py312:
            if not VENV312.exists():
                print(f"[{i}/{len(cases)}] {case.name}: skipped, no {VENV312} (make .venv312/.installed)",
                      file=sys.stderr)  # fmt: skip
                continue
            python = str(VENV312)
        print(f"[{i}/{len(cases)}] {case.name}: {case.duration} s at {case.rate} Hz"
              + ("" if args.no_pyspy else ", then raw py-spy as long") + " ...", file=sys.stderr, flush=True)  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="infertop-accuracy-") as tmp:
            run = record_beside_truth(Path(tmp), list(case.argv), case.duration, case.rate,
                                      wall_only=case.wall_only, python=python, with_pyspy=not args.no_pyspy)  # fmt: skip
            version = _python_version(python)
            rows += _rows(case, run, version)
            if case.own_calls:
                rows += _generation_rows(case, run, version, Path(tmp) / "truth.json")
    print(HEADER)
    for r in rows:
        print(_fmt_row(r))
    worst = max((abs(r["ours"] - r["truth"]) for r in rows if not r["what"].endswith(" ms")), default=0.0)
    print(f"\n{len(rows)} rows, worst stage error {worst * 100:.1f} points, "
          f"{time.monotonic() - started:.0f} s; 'busy': others took more than {BUSY_CORES} of a core")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
