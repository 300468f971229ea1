"""Stragglers: a process (a rank of a job, a replica on another host) whose steps are
consistently slower than the others'.

What is compared is each ``ProfilerStep#N`` of each process, matched by N across processes:
its **work time**, the step's wall time less the NCCL (communication) kernel time of the step.
Ranks that run collectives wait for the slowest of them inside NCCL kernels, so their wall times
come out nearly equal however uneven the work; taking the communication time out leaves each
rank's own work, and the straggler is the one with the most. Without collectives the work time
is the step's wall time. The communication time is known where an op window is one step (an
imported trace; an agent window that one step fills), else it counts as 0.

A process is a straggler when, over the steps every compared process has, its work time is at
least ``straggler_slower`` (10 %) above the median of the other processes' in more than
``straggler_steps_share`` of the steps, and its median excess is above that too -- unless
the host's CPU explains it (``host_s_doing``): the process waited for a CPU more than its peers
did. The ``cpu-starved`` finding says so instead. (Where every process waited alike, a slower
one is slower for its own reasons, or the host's in ways the kernel's counts do not show.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING

from infertop.config import SEVERITY_BANDS, FindingThresholds
from infertop.model.findings import Finding

if TYPE_CHECKING:
    from infertop.analysis.session import Session
    from infertop.model.events import OpWindow

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
FILLED = 0.8  # a window is "one step" when that step covers this much of it
FORWARD = "forward"
INTERVAL_S = 5.0  # forward calls are compared per interval of this length
MIN_CALLS = 3  # calls of a process in an interval, to count it
STEPS, CALLS = "steps", "forward calls"  # what ``comparison`` compared


@dataclass(frozen=True)
class Step:
    wall_ms: float
    comm_ms: float  # NCCL kernel time of the step (0: not known)

    @property
    def work_ms(self) -> float:
        return max(0.0, self.wall_ms - self.comm_ms)


@dataclass(frozen=True)
class Straggler:
    pid: int
    excess: float  # median over the steps of (its work / the others' median work) - 1
    slow_steps: int  # steps in which it was slower than the others' median by the threshold
    slowest_steps: int  # steps in which it was the slowest of all
    steps: int  # steps compared
    median_ms: dict[int, float]  # every compared process's median work time per step
    median_wall_ms: dict[int, float]


def window_steps(w: OpWindow) -> list[tuple[int, Step]]:
    """The ``ProfilerStep#N`` steps that start in an op window."""
    found = [(int(m.group(1)), a) for a in w.annotations if (m := STEP_RE.match(a.name))]
    if not found:
        return []
    span = w.t_end - w.t_start
    one = len(found) == 1 and span > 0 and (found[0][1].t_end - found[0][1].t_start) >= FILLED * span
    comm_us = sum(k.total_us for k in w.kernels if k.kind == "communication") if one else 0.0
    return [(n, Step((a.t_end - a.t_start) * 1000.0, comm_us / 1000.0)) for n, a in found]


def process_steps(session: Session, t: float | None = None) -> dict[int, dict[int, Step]]:
    """pid -> step number -> its step, from the op windows up to ``t``."""
    target = session.target.pid or 0
    out: dict[int, dict[int, Step]] = {}
    for w in session.op_windows_between(None, t):
        for n, step in window_steps(w):
            out.setdefault(w.pid or target, {})[n] = step
    return out


def process_forward_calls(
    session: Session, t: float | None = None, stage: str = FORWARD
) -> dict[int, dict[int, Step]]:
    """pid -> interval number (``INTERVAL_S`` apart) -> the median duration of its ``forward``
    calls that ended in it, from the stage spans (the agent's timed stage functions, annotated
    stages): replicas of a service have no ``ProfilerStep#N`` to match, but the same model
    served on every one of them; intervals with fewer than ``MIN_CALLS`` calls are left out."""
    target = session.target.pid or 0
    owner = session.thread_pid
    calls: dict[int, dict[int, list[float]]] = {}
    for sp in session.spans_between(None, t):
        if sp.stage == stage:
            per = calls.setdefault(owner.get(sp.tid, target), {})
            per.setdefault(int(sp.t_end // INTERVAL_S), []).append((sp.t_end - sp.t_start) * 1000.0)
    return {
        pid: {k: Step(median(ms), 0.0) for k, ms in per.items() if len(ms) >= MIN_CALLS}
        for pid, per in calls.items()
    }


def comparison(session: Session, t: float | None = None) -> tuple[dict[int, dict[int, Step]], str]:
    """What to compare the processes on, and its unit: their ``ProfilerStep#N`` steps where at
    least two processes have some (ranks of a job), else their forward calls per interval."""
    steps = process_steps(session, t)
    if sum(1 for s in steps.values() if s) >= 2:
        return steps, STEPS
    return process_forward_calls(session, t), CALLS


def host_s_doing(s: Straggler, waited: dict[int, float], th: FindingThresholds) -> bool:
    """``s`` is the host's CPU at work, not the process (``waited``: pid -> the share of its
    threads' runnable time spent waiting for a CPU, analysis/cpu_contention.py)."""
    mine = waited.get(s.pid)
    others = [w for pid, w in waited.items() if pid != s.pid and pid in s.median_ms]
    if mine is None or not others:
        return False
    return mine - median(others) >= th.straggler_cpu_wait_margin


def find_stragglers(
    steps: dict[int, dict[int, Step]],
    th: FindingThresholds | None = None,
    waited: dict[int, float] | None = None,
) -> list[Straggler]:
    th = th or FindingThresholds()
    procs = {pid: s for pid, s in steps.items() if len(s) >= th.straggler_min_steps}
    if len(procs) < 2:
        return []
    common = sorted(set.intersection(*(set(s) for s in procs.values())))
    if len(common) < th.straggler_min_steps:
        return []
    work = {pid: [s[n].work_ms for n in common] for pid, s in procs.items()}
    walls = {pid: median(s[n].wall_ms for n in common) for pid, s in procs.items()}
    medians = {pid: median(v) for pid, v in work.items()}
    out = []
    for pid, mine in work.items():
        ratios, slowest = [], 0
        for k in range(len(common)):
            others = [work[o][k] for o in work if o != pid]
            ref = median(others)
            ratios.append(mine[k] / ref - 1 if ref > 0 else 0.0)
            slowest += mine[k] > max(others)
        slow = sum(r >= th.straggler_slower for r in ratios)
        excess = median(ratios)
        if slow > th.straggler_steps_share * len(common) and excess >= th.straggler_slower:
            out.append(Straggler(pid, excess, slow, slowest, len(common), medians, walls))
    out = [s for s in out if not host_s_doing(s, waited or {}, th)]
    return sorted(out, key=lambda s: -s.excess)


def straggler_findings(
    steps: dict[int, dict[int, Step]],
    names: dict[int, str],
    th: FindingThresholds | None = None,
    unit: str = STEPS,
    waited: dict[int, float] | None = None,
) -> list[Finding]:
    """One ``straggler`` finding per straggling process; ``names``: pid -> how to call it;
    ``unit``: what ``steps`` hold (``comparison`` says); ``waited``: each process's share of
    its runnable time spent waiting for a CPU, where read."""
    out = []
    for s in find_stragglers(steps, th, waited):
        name = names.get(s.pid, f"pid {s.pid}")
        others = [ms for pid, ms in s.median_ms.items() if pid != s.pid]
        severity = SEVERITY_BANDS["straggler"].severity(s.excess, th or FindingThresholds())
        by_name = {names.get(p, f"pid {p}"): round(ms, 3) for p, ms in s.median_ms.items()}
        if unit == CALLS:
            title = (
                f"{name} is a straggler: its forward calls take {100 * s.excess:.0f}% longer "
                f"than the others' ({s.median_ms[s.pid]:.1f} ms vs {median(others):.1f} ms a "
                f"call; slower in {s.slow_steps} of {s.steps} {INTERVAL_S:g}-s intervals)"
            )
            evidence = {
                "pid": s.pid,
                "metric": f"forward call time, median per {INTERVAL_S:g} s interval",
                "excess": round(s.excess, 4),
                "intervals_compared": s.steps,
                "intervals_slower": s.slow_steps,
                "intervals_slowest": s.slowest_steps,
                "median_call_ms": by_name,
            }
        else:
            comm = any(st.comm_ms > 0 for st in steps[s.pid].values())
            title = (
                f"{name} is a straggler: its steps take {100 * s.excess:.0f}% longer than the "
                f"others' ({s.median_ms[s.pid]:.1f} ms vs {median(others):.1f} ms per step; "
                f"slower in {s.slow_steps} of {s.steps} steps)"
            )
            evidence = {
                "pid": s.pid,
                "metric": "step time less NCCL kernel time" if comm else "step time",
                "excess": round(s.excess, 4),
                "steps_compared": s.steps,
                "steps_slower": s.slow_steps,
                "steps_slowest": s.slowest_steps,
                "median_step_ms": by_name,
                "median_step_wall_ms": {
                    names.get(p, f"pid {p}"): round(ms, 3) for p, ms in s.median_wall_ms.items()
                },
            }
        out.append(
            Finding(
                "straggler",
                severity,
                title,
                evidence,
                (name,),
                "find why this process is slower than its peers: uneven inputs (batch sizes, "
                "sequence lengths, data loader shards), its GPU's clocks and thermal or power "
                "throttling (nvidia-smi -q -d PERFORMANCE), CPU contention on its host (other "
                "jobs, too few cores per rank, NUMA placement), a slower NCCL path (PCIe instead "
                "of NVLink: nvidia-smi topo -m, NCCL_DEBUG=INFO)",
                pid=s.pid,
            )
        )
    return out
