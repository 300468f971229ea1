"""Which stages have samples but no timed calls, why, and the one thing to do
(``analysis/untimed.py``): the words the tail view, the stage panel and watch's status share.
Each reason from the statuses and notes a real session has, the advice from its own flame."""

from __future__ import annotations

from infertop.analysis.flame import FlameNode
from infertop.analysis.session import Session
from infertop.analysis.snapshot import build_snapshot
from infertop.analysis.untimed import unreached_by_stage, untimed, untimed_stages
from infertop.config import Config
from infertop.model.events import CollectorStatus, Frame
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from tests.support import data

SHARES = [("preprocess", 0.6), ("forward", 0.25), ("queue", 0.1), ("postprocess", 0.04), ("other", 0.01)]
RUNNING = CollectorStatus(0.0, "agent", "running", "torch.profiler 0.25 s every 10 s")


def test_stages_with_calls_and_waits_are_not_listed() -> None:
    gap = untimed("3.11.7", RUNNING, (), SHARES, {"forward"})
    assert gap is not None and gap.stages == ("preprocess", "postprocess")  # largest first
    assert untimed("3.11.7", RUNNING, (), SHARES, {"forward", "preprocess", "postprocess"}) is None


def test_without_the_agent_it_says_why_it_did_not_run() -> None:
    off = CollectorStatus(0.0, "agent", "unavailable", "off (--no-inject)")
    gap = untimed("3.11.7", off, (), SHARES, ())
    assert gap is not None and "no agent (off (--no-inject))" in gap.why
    assert gap.todo.startswith("Leave out --no-inject")
    busy = CollectorStatus(0.0, "agent", "unavailable", "pid 7 already has an agent serving another client")
    gap = untimed("3.11.7", busy, (), SHARES, ())
    assert gap is not None and gap.todo == "Detach the other infertop, then attach again."
    line = gap.line()
    assert line.startswith("preprocess, forward, postprocess: no timed calls on Python 3.11.7 (py-spy's shares only)")
    # no profiler windows (torch not imported yet) is no reason: the agent times calls anyway
    no_torch = CollectorStatus(0.0, "agent", "unavailable", "torch is not imported in the target: no profiler windows")
    for timed in ((), {"forward"}):
        gap = untimed("3.11.7", no_torch, (), SHARES, timed)
        assert gap is not None and gap.why == "no rule names their functions", gap


def test_a_session_that_ended_as_usual_is_not_a_reason() -> None:
    """A replay's agent says ``detached`` at its end: the calls it missed had another reason."""
    detached = CollectorStatus(0.0, "agent", "stopped", "detached")
    gap = untimed("3.11.7", detached, (), SHARES, {"forward"})
    assert gap is not None and gap.why == "no rule names their functions"
    lost = CollectorStatus(0.0, "agent", "stopped", "the target closed the connection")
    gap = untimed("3.11.7", lost, (), SHARES, ())
    assert gap is not None and "connection ended" in gap.why and gap.todo == "Attach again."


def test_a_rule_s_function_the_wrappers_could_not_reach_is_named_with_its_stage() -> None:
    note = (
        "agent: Python 3.11: 2 timed functions not reached (defined inside another function, a "
        "generator, or a model under torch.compile: their calls go untimed, their samples still "
        "count): nested.py:crunch [preprocess], Net.forward [forward], utils.py:generate [prefill/decode]"
    )
    assert unreached_by_stage([note]) == {
        "preprocess": ["nested.py:crunch"],
        "forward": ["Net.forward"],
        "prefill": ["utils.py:generate"],
        "decode": ["utils.py:generate"],
    }
    gap = untimed("3.11.7", RUNNING, ("agent: windows cost the target ~195 ms each", note), SHARES, {"forward"})
    assert gap is not None and gap.unreached == ("nested.py:crunch",)
    assert gap.why == "the agent could not reach nested.py:crunch"
    assert "--stage preprocess=FUNCTION" in gap.todo and 'infertop.stage("preprocess")' in gap.todo
    # a note of an older agent, without the stages: no stage to pin it on
    assert unreached_by_stage(["agent: Python 3.11: 1 timed functions not reached (x): x.py:f"]) == {}


def _flame() -> FlameNode:
    """main → serve (two lines) → tokenize_batch (all preprocess) | model (forward)."""
    root = FlameNode(None)

    def add(path: list[Frame], stage: str, n: int) -> None:
        node = root
        node.total += n
        node.stages[stage] = node.stages.get(stage, 0) + n
        for f in path:
            node = node.children.setdefault(f, FlameNode(f, node))
            node.total += n
            node.stages[stage] = node.stages.get(stage, 0) + n

    main, loop = Frame("main", "/srv/app.py", 5), Frame("Batcher.serve", "/srv/app.py", 40)
    add([main, loop, Frame("tokenize_batch", "/srv/tok.py", 9), Frame("encode", "/srv/tok.py", 20)], "preprocess", 60)
    add([main, Frame("Batcher.serve", "/srv/app.py", 41), Frame("Model.forward", "/srv/m.py", 3)], "forward", 30)
    add([main, Frame("Batcher.serve", "/srv/app.py", 42), Frame("<lambda>", "/srv/app.py", 42)], "postprocess", 5)
    return root


def test_the_rule_to_give_is_the_outermost_function_all_of_the_stage() -> None:
    gap = untimed("3.11.7", RUNNING, (), SHARES, {"forward"}, _flame())
    assert gap is not None and gap.todo == "Time it: --stage 'preprocess=*tok.py:tokenize_batch'."
    # a lambda is no function a rule can reach: the rule's shape instead
    only_post = untimed("3.11.7", RUNNING, (), [("postprocess", 0.05)], (), _flame())
    assert only_post is not None and only_post.todo == "Time it: --stage postprocess=FUNCTION."


def test_an_import_s_work_is_no_call_to_time() -> None:
    """A model's module imported at start-up (transformers' lazy modules) runs its forward-ish
    code under the import machinery: no rule is offered from it."""
    root = FlameNode(None)
    path = [Frame("<module>", "/srv/app.py", 1), Frame("_find_and_load", "<frozen importlib._bootstrap>", 1),
            Frame("_LazyModule._get_module", "/venv/transformers/utils/import_utils.py", 9),
            Frame("Linear.__init__", "/venv/torch/nn/modules/linear.py", 3)]  # fmt: skip
    node = root
    for f in [None, *path]:
        if f is not None:
            node = node.children.setdefault(f, FlameNode(f, node))
        node.total, node.stages = 40, {"forward": 40}
    gap = untimed("3.11.7", RUNNING, (), [("forward", 0.3)], (), root)
    assert gap is not None and gap.todo == "Time it: --stage forward=FUNCTION."


def test_a_recording_without_the_agent_says_so_with_its_python() -> None:
    """The slow-tokenizer sample recorded with --no-inject (Python 3.11): every work stage is
    listed, the reason is the flag, and the rule names the sample's own tokenizer."""
    src = ReplaySource(read_recording(str(data.DATA / "recordings" / "textgen_slow_tokenizer.infertop")), Config())
    gap = untimed_stages(build_snapshot(src.session, t=src.t))
    assert gap is not None and gap.python == "3.11.7"
    assert gap.stages == ("preprocess", "forward", "postprocess", "serialize")
    assert gap.why == "no agent (off (--no-inject))"
    assert "--stage 'preprocess=*textgen_service.py:tokenize_batch'" in gap.todo
    assert untimed_stages(build_snapshot(Session())) is None  # no samples: nothing to say
