"""infertop's stage rules and the agent's ``stage_functions`` are one pattern language
(``infertop/agent/payload/patterns.py``): on real recorded stacks (py-spy's of a vLLM server,
tests/data/vllm/, and the committed recordings' stacks, tests/data/recordings/) the host's
classifier and the agent's matcher put every stack in the same stage."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from infertop.agent.payload.stages import match_stage, parse_stage_patterns
from infertop.analysis.stages import StageClassifier
from infertop.annotate import STAGE_FRAME_PREFIX
from infertop.collect.pyspy import parse_raw
from infertop.model.events import Frame, FrameDef, StackDef, StageRules
from infertop.record.reader import read_recording

DATA = Path(__file__).resolve().parents[1] / "data"

#: rules over what those stacks hold: bare method names, qualified names, ``<locals>``, file
#: globs with and without a function part; stage names no default rule uses
RULES = (
    ("u_locals", "*multiproc_executor.py:*.<locals>.*"),
    ("u_bare", "dequeue"),
    ("u_worker_file", "*/vllm/v1/worker/*:"),
    ("u_class", "*/shm_broadcast.py:MessageQueue.*"),
    ("u_thread", "*/threading.py:Thread.run"),
    ("u_generate", "*generate*"),
    ("u_encode", "encode*"),
    ("u_a_colon", "*pauses_target.py:*_path"),
)


def recorded_stacks() -> Iterator[tuple[tuple[tuple[str, str], ...], Sequence[Frame]]]:
    """(the recording's own rules, a stack root first) for every stack recorded here."""
    for name in ("engine_core.raw", "worker.raw"):
        rows, bad = parse_raw((DATA / "vllm" / name).read_text())
        assert bad == 0 and rows
        for _tid, _name, frames, _n in rows:
            yield (), list(frames)
    for path in sorted((DATA / "recordings").glob("*.infertop")):
        events = read_recording(str(path)).events
        rules = next((e.rules for e in events if isinstance(e, StageRules)), ())
        frames = {e.frame_id: e.frame for e in events if isinstance(e, FrameDef)}
        for ev in events:
            if isinstance(ev, StackDef):
                yield rules, [frames[i] for i in ev.frames]


def agent_stage(patterns: list, frames: Sequence[Frame]) -> str | None:
    """The stage the agent's timing gives a stack: the innermost function its patterns name
    (its timed call is the innermost span around the stack)."""
    for frame in reversed(frames):
        stage = match_stage(patterns, frame.file, frame.function)
        if stage is not None:
            return stage
    return None


def test_host_and_agent_put_recorded_stacks_in_the_same_stage() -> None:
    hits: Counter[str] = Counter()
    stacks = 0
    for recorded, frames in recorded_stacks():
        if any(f.function.startswith(STAGE_FRAME_PREFIX) for f in frames):
            continue  # an infertop.stage annotation decides there, not a pattern
        rules = (*recorded, *RULES)
        host = StageClassifier(rules).classify(frames)[0]
        agent = agent_stage(parse_stage_patterns([list(r) for r in rules]), frames)
        stacks += 1
        if agent is None:
            assert host not in {stage for stage, _ in rules}, [f.function for f in frames]
        else:
            assert host == agent, [f.function for f in frames]
            hits[agent] += 1
    assert stacks > 300
    # every kind of pattern above decided some real stack
    assert {stage for stage, _ in RULES} <= set(hits), hits
    assert hits["postprocess"], hits  # one of tail_pauses' own --stage rules
