"""The host's CPU as a cause: ``cpu-starved`` (docs/findings.md), from each process's waits on a
run queue (analysis/cpu_contention.py). Registered in ``rules.RULES`` after the rules of
``rules.py`` (the package imports this module)."""

from __future__ import annotations

from infertop.analysis.findings.rules import FindingInput, _severity, rule
from infertop.config import FindingThresholds
from infertop.model.findings import Finding

HINT = (
    "every stage's latency holds this wait, whichever stage it lands in: give the service the "
    "CPU it asks for (a higher CPU limit or request; no more busy threads than cores: "
    "torch.set_num_threads / OMP_NUM_THREADS, fewer workers per core), or move the neighbours "
    "that take it (pidstat -u 1, top -H show who runs there); until then, read the stages' "
    "shares as the machine's as much as the code's"
)


@rule("cpu-starved")
def cpu_starved(inp: FindingInput, th: FindingThresholds) -> Finding | None:
    c = inp.cpu
    if c is None:
        return None
    run, wait = sum(p.run_s for p in c.processes), sum(p.wait_s for p in c.processes)
    waited = c.waited
    if waited is None or waited < th.cpu_starved_share or run + wait < th.cpu_starved_min_runnable_s:
        return None
    who = "the target's threads"
    if len(c.processes) > 1:
        worst = max(c.processes, key=lambda p: p.waited or 0.0)
        who = f"its processes' threads (pid {worst.pid} most: {worst.waited or 0.0:.0%})"
    title = (
        f"the host is short of CPU: {who} waited for a CPU {waited:.0%} of the time they were "
        f"ready to run ({wait:.1f} s of {run + wait:.1f} s)"
    )
    evidence = {
        "waited_share": round(waited, 4),
        "run_s": round(run, 3),
        "wait_s": round(wait, 3),
        "processes": {str(p.pid): round(p.waited or 0.0, 4) for p in c.processes},
    }
    return Finding("cpu-starved", _severity("cpu-starved", waited, th), title, evidence, (), HINT)
