"""The stages that have samples but no timed calls, why, and the one thing to do: the words the
tail view (key l), the stage panel's latency column and watch's status line share
(docs/ui.md, "Stages without timed calls").

Pure: the target's Python, the agent's status and the notes it left (the functions its
wrappers could not reach, each with its stage: ``agent/payload/spans.py``), the stages seen
and those timed in; the reason and the advice out. Call boundaries come from the agent alone
(its timed functions and ``infertop.stage`` blocks): without it a stage has py-spy's shares
and nothing else."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from infertop.analysis.flame import FlameNode
from infertop.analysis.snapshot import Snapshot
from infertop.model.events import CollectorStatus

#: stages no call boundary is expected of: waits, the rest, infertop's own work, the hop
#: between processes and an engine's parts of a step (its step is timed as ``step``)
NOT_CALLS = frozenset({"idle", "queue", "other", "ipc", "sync", "infertop", "schedule", "prepare"})
#: a stage under this share of the session's samples is not worth a line
MIN_SHARE = 0.02
#: ``app.py:tokenize [preprocess]`` in the agent's "not reached" note
_NAMED = re.compile(r"^(?P<name>.+?) \[(?P<stages>[^\[\]]+)\]$")


@dataclass(frozen=True)
class Untimed:
    """Stages seen without a timed call: py-spy's shares only, no latency, no tail."""

    python: str | None  # the target's, as it reported it
    stages: tuple[str, ...]  # largest share first
    why: str  # a few words
    todo: str  # the one thing to do, a sentence
    unreached: tuple[str, ...] = ()  # their functions the agent's wrappers could not reach
    detail: str = ""  # what lies behind ``why``, for the long line

    def line(self, short: bool = False) -> str:
        """``preprocess, postprocess: no timed calls on Python 3.11.7 (py-spy's shares only):
        WHY (DETAIL). TODO``; ``short``: without the detail and the parenthesis, two stages
        named and the number of the others."""
        on = f" on Python {self.python}" if self.python else ""
        what = ", ".join(self.stages) if self.stages else "no stage"
        if short:  # at most two stages named: the thing to do must fit a narrow panel
            if len(self.stages) > 2:
                what = f"{', '.join(self.stages[:2])} +{len(self.stages) - 2}"
            return f"{what}: no timed calls{on}, {self.why}. {self.todo}"
        why = f"{self.why} ({self.detail})" if self.detail else self.why
        return f"{what}: no timed calls{on} (py-spy's shares only): {why}. {self.todo}"


def unreached_by_stage(notes: Iterable[str]) -> dict[str, list[str]]:
    """{stage: functions of it the wrappers could not reach}, from the agent's notes."""
    out: dict[str, list[str]] = {}
    for note in notes:
        if not note.startswith("agent: ") or "not reached" not in note or "): " not in note:
            continue
        for item in note.split("): ", 1)[1].split(", "):
            m = _NAMED.match(item.strip())
            if m is None:
                continue
            for stage in m["stages"].split("/"):
                out.setdefault(stage, []).append(m["name"])
    return out


def suggest(flame: FlameNode | None, stage: str) -> str | None:
    """A ``--stage`` rule for ``stage``: the function whose calls hold most of the stage's
    samples, the outermost one that is (nearly) all of that stage, called from a line that is
    too; None without one."""
    if flame is None:
        return None
    need = flame.stages.get(stage, 0) / 4  # a quarter of the stage at least
    best: tuple[int, FlameNode] | None = None
    stack = [(flame, False)]
    while stack:
        node, inside = stack.pop()
        n = node.stages.get(stage, 0)
        if n <= need or (node.frame is not None and "importlib" in node.frame.file):
            continue  # too little of it; an import's work (a module's body) is no call to time
        pure = node.frame is not None and n >= 0.9 * node.total and not node.frame.file.startswith("<")
        if pure and not inside and (best is None or n > best[0]):
            best = (n, node)
        stack.extend((c, inside or pure) for c in node.children.values())
    if best is None:
        return None
    # a flame of lines: the outermost node of the stage is the line that calls into it, so
    # the function is its callee, where one holds (nearly) all of it
    n, node = best
    callee = max(node.children.values(), key=lambda c: c.stages.get(stage, 0), default=None)
    if callee is None or callee.frame is None or callee.stages.get(stage, 0) < 0.9 * n:
        return None
    frame = callee.frame
    if "<" in frame.function or frame.file.startswith("<"):
        return None  # a function defined inside another, a lambda, frozen or generated code
    base = frame.file.replace("\\", "/").rsplit("/", 1)[-1]
    return f"--stage '{stage}=*{base}:{frame.function}'"


def untimed(
    python: str | None,
    agent: CollectorStatus | None,
    notes: Sequence[str],
    shares: Iterable[tuple[str, float]],
    timed: Iterable[str],
    flame: FlameNode | None = None,
) -> Untimed | None:
    """The stages with at least MIN_SHARE of the samples (``shares``: (stage, share)) and no
    timed call, why, and what to do; None when every such stage has calls.

    Why, the first that holds: the agent did not run (its status says why), it is still
    coming, its connection ended, a rule's function its wrappers could not reach (its note),
    else no rule names the stage's functions (the defaults time tokenizers, model forwards,
    ``generate``, the serializers and requests)."""
    done = set(timed)
    stages = tuple(
        name for name, share in sorted(shares, key=lambda s: -s[1])
        if share >= MIN_SHARE and name not in NOT_CALLS and name not in done
    )  # fmt: skip
    if not stages:
        return None
    first = stages[0]
    rule = suggest(flame, first) or f"--stage {first}=FUNCTION"
    annotate = f'with infertop.stage("{first}"):'
    # no status but calls came (a session made by hand, an import): an agent sent them
    state = agent.state if agent is not None else ("running" if done else "unavailable")
    message = agent.message if agent is not None else ""
    # its windows unavailable (no torch imported, a profiler busy): the agent runs all the same
    if state == "unavailable" and (done or "profiler" in message):
        state = "running"
    if state in ("unavailable", "failed"):
        why = f"no agent ({message})" if message else "no agent"
        if "--no-inject" in message:
            todo = f"Leave out --no-inject (and give {rule} where the defaults do not time it)"
        elif "another client" in message or "another infertop" in message:
            todo = "Detach the other infertop, then attach again"
        else:
            todo = "Fix that and attach again: the agent times the calls"
        return Untimed(python, stages, why, todo + ".")
    if state == "stopped" and not done and message != "detached":  # detached: the session's end
        why = f"the agent's connection ended ({message})" if message else "the agent's connection ended"
        return Untimed(python, stages, why, "Attach again.")
    if not done and ("injecting" in message or "connecting" in message):
        return Untimed(python, stages, "the agent is starting", "Wait a few seconds.")
    # no reason of Python's own: the wrappers time the same calls from 3.8 (the agent's oldest)
    # to 3.11, sys.monitoring from 3.12
    lost = unreached_by_stage(notes)
    names = tuple(n for s in stages for n in lost.get(s, ()))
    if names:
        if any(rule.endswith(f"{n.rsplit(':', 1)[-1]}'") for n in names):
            rule = f"--stage {first}=FUNCTION"  # the function it would name is the lost one
        why = f"the agent could not reach {', '.join(names[:3])}"
        detail = "a reference taken before it came, a function defined inside another, a generator, a compiled model"
        todo = f"Name a module-level function or a method that runs it ({rule}), or wrap it in `{annotate}`"
        return Untimed(python, stages, why, todo + ".", names, detail)
    why = "no rule names their functions"
    detail = "by default the agent times tokenizers, models, generate, json.dumps and requests"
    return Untimed(python, stages, why, f"Time it: {rule}.", detail=detail)


def untimed_stages(snap: Snapshot) -> Untimed | None:
    """``untimed`` of a snapshot: the shares of its last seconds (start-up's imports and model
    loading long gone are not a stage to time), the calls of its whole session, its agent's
    status and notes."""
    agent = next((s for s in snap.statuses if s.collector == "agent"), None)
    timed = {s.name for s in (*snap.totals, *snap.recent) if s.calls} | {t.stage for t in snap.tails}
    shares = [(s.name, s.share) for s in (snap.recent or snap.totals)]
    return untimed(snap.target.python, agent, snap.status_notes, shares, timed, snap.flame)
