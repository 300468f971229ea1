"""The flame of a real Hugging Face model: transformers' BertModel (random weights, a WordPiece
vocabulary trained here), recorded with real py-spy. Its stacks go through torch's
``Module._wrapped_call_impl``/``_call_impl`` and transformers' decorator wrappers at every
layer; by default none of them is drawn, and the layers sit under the code that called them."""

from __future__ import annotations

import pytest

from infertop.analysis.flame import FlameNode
from infertop.analysis.fold import FlameShape
from infertop.analysis.snapshot import build_snapshot
from infertop.config import Config
from infertop.record.reader import read_recording
from infertop.sources import ReplaySource

from .helpers import infertop, read_truth, start_target, stop_target, until

pytestmark = pytest.mark.slow


def _functions(root: FlameNode) -> dict[str, list[FlameNode]]:
    out: dict[str, list[FlameNode]] = {}
    stack = list(root.children.values())
    while stack:
        node = stack.pop()
        assert node.frame is not None
        out.setdefault(node.frame.function, []).append(node)
        stack.extend(node.children.values())
    return out


def test_a_hugging_face_model_draws_no_call_plumbing(tmp_path) -> None:
    truth = str(tmp_path / "truth.json")
    target = start_target(["tests/integration/targets/embed_loop.py", "--truth", truth])
    try:
        until(lambda: read_truth(truth, 120)["requests"] >= 32, 120, "the embedding loop to serve")
        out = str(tmp_path / "hf.infertop")
        p = infertop("record", str(target.pid), "-o", out, "--duration", "5", "--no-inject")
        assert p.returncode == 0, p.stderr
    finally:
        stop_target(target)
    src = ReplaySource(read_recording(out), Config())
    raw = _functions(build_snapshot(src.session, t=src.t, shape=FlameShape(fold=False)).flame)
    shown = _functions(build_snapshot(src.session, t=src.t).flame)
    plumbing = [f for f in raw if f.endswith(("_call_impl", "wrapper", "wrapped_func",
                                              "forward_with_checkpointing", "_bootstrap"))]  # fmt: skip
    assert "Module._call_impl" in plumbing and len(plumbing) >= 3, sorted(raw)
    assert not [f for f in plumbing if f in shown], sorted(shown)
    # BertModel.forward calls its encoder through __call__: now the encoder is its child
    assert any(
        n.parent is not None and n.parent.frame is not None
        and n.parent.frame.function == "BertModel.forward"
        for n in shown["BertEncoder.forward"]
    )  # fmt: skip
