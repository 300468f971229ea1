"""Which code the agent follows in a generation (``find_generation_codes``), and when it says
that the target's transformers is one it does not know, with the real transformers in this
process (the timer itself needs Python 3.12: tests/agent/test_generation_monitor.py)."""

from __future__ import annotations

import sys

import pytest

from infertop.agent.payload.generation import find_generation_codes, transformers_warning
from infertop.agent.payload.stages import parse_stage_patterns


@pytest.fixture(scope="module")
def hf():  # type: ignore[no-untyped-def]
    """transformers' generation modules, imported by the tests (seconds: not at collection)."""
    from transformers.generation import stopping_criteria, utils

    return utils, stopping_criteria


def _code(fn):
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn.__code__


def my_decode_loop(model, ids, n):
    return [model(ids) for _ in range(n)]


def test_generate_and_the_models_forwards_are_followed_nothing_per_token(hf) -> None:
    utils, stopping_criteria = hf
    g = utils.GenerationMixin
    model_forward = _code(my_decode_loop)  # any code handed as a model's forward
    codes = find_generation_codes((), [model_forward])
    assert codes[_code(g.generate)] == "call"  # under torch.no_grad's shared wrapper
    assert codes[model_forward] == "forward"
    # the loops, _prefill and the stopping criteria (called each token) are not watched
    for fn in (g._prefill, g._sample, g._beam_search, stopping_criteria.StoppingCriteriaList.__call__):
        assert _code(fn) not in codes
    assert transformers_warning(codes) is None  # transformers 5.24: known


def test_a_named_loop_is_a_call_and_nothing_known_without_known_entry_points(hf) -> None:
    user = parse_stage_patterns([["decode", "*test_generation_codes.py:my_decode_loop"]])
    codes = find_generation_codes(user, (), known=False)
    assert codes == {my_decode_loop.__code__: "call"}


def test_an_unknown_transformers_is_said_once_with_what_is_missing(monkeypatch, hf) -> None:
    codes = find_generation_codes()
    # the module the agent reads (another test may have imported transformers afresh)
    tf = sys.modules["transformers"]
    monkeypatch.setattr(tf, "__version__", "7.1.0")
    msg = transformers_warning(codes)
    assert msg and "transformers 7.1.0" in msg and "does not know" in msg and "stack rules" in msg
    monkeypatch.setattr(tf, "__version__", "5.24.0")
    without = {c: k for c, k in codes.items() if k != "call"}  # a release that renamed generate
    assert "GenerationMixin.generate was not found" in transformers_warning(without)
