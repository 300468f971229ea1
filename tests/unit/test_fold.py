"""Call plumbing folded into its caller, and function-level frames, on a real recording.

The committed recording is of the bundled text-generation service: its stacks run through
``Thread._bootstrap`` and ``Module._wrapped_call_impl`` / ``_call_impl`` as every torch model's
do.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from infertop.analysis.flame import FlameNode
from infertop.analysis.fold import FlameShape, FoldRule
from infertop.analysis.snapshot import Snapshot, build_snapshot
from infertop.config import DEFAULT_FOLD_FRAMES, Config, load_config
from infertop.errors import UsageError
from infertop.model.events import Frame
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource
from tests.support import data

RECORDING = data.DATA / "recordings" / "textgen_service.infertop"
PLUMBING = ("_wrapped_call_impl", "_call_impl", "_bootstrap", "_bootstrap_inner")


def _snap(shape: FlameShape) -> Snapshot:
    src = ReplaySource(read_recording(str(RECORDING)), Config())
    return build_snapshot(src.session, t=src.t, shape=shape)


def _nodes(root: FlameNode) -> list[FlameNode]:
    out, stack = [], list(root.children.values())
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children.values())
    return out


def _short(node: FlameNode) -> str:
    assert node.frame is not None
    return node.frame.function.rpartition(".")[2]


def test_plumbing_is_drawn_only_when_asked_and_no_time_is_lost() -> None:
    raw = _snap(FlameShape(fold=False))
    folded = _snap(FlameShape())
    raw_names = {_short(n) for n in _nodes(raw.flame)}
    assert set(PLUMBING) <= raw_names  # the recording has them: the test can fail
    assert not {_short(n) for n in _nodes(folded.flame)} & set(PLUMBING)
    assert folded.flame.total == raw.flame.total > 0

    # a layer's forward now sits right under the model code that called it
    def called_from_the_model(n: FlameNode) -> bool:
        up = n.parent.frame if n.parent is not None else None
        return n.frame is not None and n.frame.file.endswith("torch/nn/modules/linear.py") and (
            up is not None and up.file.endswith("textgen_service.py"))  # fmt: skip

    assert any(map(called_from_the_model, _nodes(folded.flame)))
    assert not any(map(called_from_the_model, _nodes(raw.flame)))
    # fewer levels: the deepest stack is shorter by the plumbing it went through
    depth = lambda root: max(len(n.path()) for n in _nodes(root))  # noqa: E731
    assert depth(folded.flame) < depth(raw.flame)
    # the stages do not change: they are classified on the stacks as sampled
    assert folded.flame.stages == raw.flame.stages
    assert sum(t.self_count for t in folded.top) == sum(t.self_count for t in raw.top)


def test_function_level_frames_merge_the_lines_of_one_function() -> None:
    by_line = _snap(FlameShape())
    by_function = _snap(FlameShape(lines=False))
    for node in _nodes(by_function.flame):
        assert node.frame is not None and node.frame.line == 0
        names = [(c.frame.function, c.frame.file) for c in node.children.values() if c.frame]
        assert len(names) == len(set(names))
    # some function was sampled at several lines, so the function view has fewer nodes
    assert len(_nodes(by_function.flame)) < len(_nodes(by_line.flame))
    assert by_function.flame.total == by_line.flame.total


@pytest.mark.parametrize(
    "frame, folded",
    [
        (Frame("Module._call_impl", "/venv/torch/nn/modules/module.py", 1790), True),
        (Frame("_call_impl", "/venv/torch/nn/modules/module.py", 1790), True),  # Python 3.10
        (Frame("Thread.run", "/usr/lib/python3.12/threading.py", 1010), True),
        (Frame("run", "/usr/lib/python3.10/threading.py", 946), True),
        (Frame("_bootstrap_inner", "/usr/lib/python3.10/threading.py", 1016), True),
        (Frame("decorate_context", "/venv/torch/utils/_contextlib.py", 120), True),
        (
            Frame(
                "deprecate_kwarg.<locals>.wrapper.<locals>.wrapped_func",
                "/venv/transformers/utils/deprecation.py",
                172,
            ),
            True,
        ),  # fmt: skip
        (Frame("BertModel.forward", "/venv/transformers/models/bert/modeling_bert.py", 900), False),
        (Frame("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241), True),
        # the agent's wrapper of a timed function (Python < 3.12), as py-spy names it
        (Frame("_Wrappers._plain_wrapper.<locals>.infertop_timed", "<infertop-agent>", 3574), True),
        (Frame("_Agent._loop", "<infertop-agent>", 100), False),  # the agent's own work stays
        (Frame("MyThread.run", "/srv/app/worker.py", 10), False),  # a user's own run()
        (Frame("Module.__call__", "/venv/torch/nn/modules/module.py", 1), False),
    ],
)
def test_default_patterns_fold_plumbing_only(frame: Frame, folded: bool) -> None:
    assert any(FoldRule(p).matches(frame) for p in DEFAULT_FOLD_FRAMES) is folded


def test_config_adds_patterns_or_replaces_the_defaults(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[flame]\nfold = ["*/app/deco.py:wrapper"]\n')
    assert load_config(str(cfg)).fold_frames == DEFAULT_FOLD_FRAMES + ("*/app/deco.py:wrapper",)
    cfg.write_text('[flame]\nfold = "*:wrapper"\nfold_defaults = false\n')
    assert load_config(str(cfg)).fold_frames == ("*:wrapper",)
    for bad, needle in [
        ("[flame]\nfold = [1]\n", "flame.fold must be a list"),
        ("[flame]\nfolds = []\n", "unknown [flame] key 'folds'"),
        ("[flame]\nfold_defaults = 'no'\n", "true or false"),
        ("flame = 3\n", "[flame] must be a table"),
    ]:
        cfg.write_text(bad)
        with pytest.raises(UsageError) as err:
            load_config(str(cfg))
        assert needle in str(err.value)
