from __future__ import annotations

import pytest

import infertop
from infertop.analysis.stages import StageClassifier, StageRule
from infertop.config import parse_stage_arg
from infertop.errors import UsageError
from infertop.model.events import Frame

PY = "/usr/lib/python3.11"
TORCH = "/venv/lib/python3.11/site-packages/torch"


def F(func: str, file: str = "/srv/app/server.py") -> Frame:
    return Frame(func, file, 10)


def stage(frames: list[Frame], rules=()) -> str:
    return StageClassifier(rules).classify(frames)[0]


@pytest.mark.parametrize(
    "frames,expected",
    [
        ([F("handle"), F("dumps", f"{PY}/json/__init__.py"), F("JSONEncoder.iterencode", f"{PY}/json/encoder.py")], "serialize"),
        ([F("handle"), F("loads", f"{PY}/json/__init__.py"), F("JSONDecoder.decode", f"{PY}/json/decoder.py")], "preprocess"),
        ([F("handle"), F("Tokenizer.encode", "/srv/app/tokenizer.py"), F("_merge_pairs", "/srv/app/tokenizer.py")], "preprocess"),
        ([F("handle"), F("Tokenizer.decode", "/srv/app/tokenizer.py")], "postprocess"),
        ([F("handle"), F("PreTrainedTokenizerBase.__call__", "/venv/transformers/tokenization_utils_base.py")], "preprocess"),
        ([F("handle"), F("generate"), F("Module._call_impl", f"{TORCH}/nn/modules/module.py"), F("Block.forward", "/srv/app/model.py")], "forward"),
        ([F("handle"), F("generate"), F("sample_next_token")], "postprocess"),
        ([F("batcher"), F("Queue.get", f"{PY}/queue.py"), F("Condition.wait", f"{PY}/threading.py")], "queue"),
        ([F("handle"), F("synchronize", f"{TORCH}/cuda/__init__.py")], "sync"),
        ([F("handle"), F("detokenize")], "postprocess"),
        ([F("<module>"), F("main_loop")], "other"),
    ],
)
def test_default_rules(frames: list[Frame], expected: str) -> None:
    assert stage(frames) == expected


def test_innermost_matching_frame_wins() -> None:
    # serialize inside a tokenizer's encode: the inner json frame decides
    frames = [F("Tokenizer.encode", "/a/tokenizer.py"), F("dumps", f"{PY}/json/__init__.py")]
    assert stage(frames) == "serialize"


def test_user_rules_win_over_defaults_and_can_name_new_stages() -> None:
    frames = [F("encode_batch", "/srv/app/server.py"), F("Module._call_impl", f"{TORCH}/nn/modules/module.py")]
    assert stage(frames) == "forward"
    assert stage(frames, [parse_stage_arg("preprocess=*server.py:encode_batch")]) == "preprocess"
    assert stage([F("lookup", "/srv/faiss/index.py")], [parse_stage_arg("retrieval=*/faiss/*:*")]) == "retrieval"


def test_annotation_frames_win_over_everything() -> None:
    frames = [F("infertop:ingest"), F("dumps", f"{PY}/json/__init__.py")]
    assert stage(frames, [parse_stage_arg("serialize=dumps")]) == "ingest"


def test_decorator_names_the_frame_for_samplers() -> None:
    seen = []

    @infertop.stage("preprocess")
    def encode(x: int) -> int:
        import sys

        seen.append(sys._getframe(1).f_code.co_name)
        return x * 2

    assert encode(3) == 6
    assert seen == ["infertop:preprocess"]
    assert encode.__name__ == "encode"


def test_context_manager_reports_spans_to_an_installed_sink() -> None:
    from infertop.annotate import set_span_sink

    spans = []
    set_span_sink(lambda tid, name, s, e: spans.append((name, e >= s)))
    try:
        with infertop.stage("serialize"):
            pass
    finally:
        set_span_sink(None)
    with infertop.stage("serialize"):
        pass  # no sink: nothing recorded, nothing raised
    assert spans == [("serialize", True)]


@pytest.mark.parametrize("bad", ["", "noequals", "=x", "x=", "idle=*foo", "a b=c"])
def test_bad_stage_args_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_stage_arg(bad)


def test_bad_stage_names_in_code_raise_valueerror() -> None:
    with pytest.raises(ValueError):
        infertop.stage("has space")


def test_bare_method_glob_matches_qualified_name() -> None:
    rule = StageRule.parse("x", "encode")
    assert rule.matches(Frame("Tokenizer.encode", "/a.py", 1))
    assert not rule.matches(Frame("Tokenizer.encoder_step", "/a.py", 1))


def test_a_thread_waiting_for_its_reply_is_idle_not_queue() -> None:
    # py-spy reports a woken thread still in Condition.wait as active; it is waiting, not working
    client = [F("client_loop"), F("Event.wait", f"{PY}/threading.py"), F("Condition.wait", f"{PY}/threading.py")]
    assert stage(client) == "idle"
    # ...even when an outer frame matches a work rule
    handler = [F("preprocess_request"), F("Future.result", f"{PY}/concurrent/futures/_base.py"), F("Condition.wait", f"{PY}/threading.py")]
    assert stage(handler) == "idle"


def test_a_batcher_waiting_on_its_queue_is_queue() -> None:
    batcher = [F("Batcher.run"), F("Queue.get", f"{PY}/queue.py"), F("Condition.wait", f"{PY}/threading.py")]
    assert stage(batcher) == "queue"
    named = [F("wait_for_batch"), F("Condition.wait", f"{PY}/threading.py")]
    assert stage(named) == "queue"


def test_user_rules_can_claim_a_wait() -> None:
    client = [F("client_loop"), F("Event.wait", f"{PY}/threading.py")]
    assert stage(client, [parse_stage_arg("queue=client_loop")]) == "queue"


def test_the_agent_waiting_is_idle_and_working_is_its_own_stage() -> None:
    """The injected agent's thread sits in ``_wait_for_io`` between windows: idle, not a share
    of the target's active time; stopping and reducing a window is the ``infertop`` stage."""
    c = StageClassifier()
    base = [F("_infertop_agent_thread", "<infertop-agent>"), F("_Agent._run", "<infertop-agent>")]
    waiting = [*base, F("_Agent._step", "<infertop-agent>"), F("_Agent._wait_for_io", "<infertop-agent>")]
    working = [*base, F("_Agent._step", "<infertop-agent>"), F("_Agent._end_window", "<infertop-agent>")]
    assert c.classify(waiting)[0] == "idle"
    assert c.classify(working)[0] == "infertop"


GEN = "/venv/lib/python3.11/site-packages/transformers/generation"


@pytest.mark.parametrize(
    "tail,expected",
    [
        # the prompt's forward, the model's modules included
        ([F("GenerationMixin._sample", f"{GEN}/utils.py"), F("GenerationMixin._prefill", f"{GEN}/utils.py"),
          F("GPT2LMHeadModel.forward", "/venv/transformers/models/gpt2/modeling_gpt2.py"),
          F("Linear.forward", f"{TORCH}/nn/modules/linear.py")], "prefill"),
        # generate's set-up before the loop
        ([F("GenerationMixin._prepare_cache_for_generation", f"{GEN}/utils.py")], "prefill"),
        # a step of the loop: the forward, the logits processors, a wait inside it
        ([F("GenerationMixin._sample", f"{GEN}/utils.py"), F("Module._call_impl", f"{TORCH}/nn/modules/module.py")], "decode"),
        ([F("GenerationMixin._sample", f"{GEN}/utils.py"), F("TopKLogitsWarper.__call__", f"{GEN}/logits_process.py")], "decode"),
        ([F("GenerationMixin._beam_search", f"{GEN}/utils.py"), F("Event.wait", f"{PY}/threading.py")], "decode"),
    ],
)  # fmt: skip
def test_a_generate_call_is_prefill_then_decode(tail: list[Frame], expected: str) -> None:
    head = [F("serve"), F("decorate_context", f"{TORCH}/utils/_contextlib.py"), F("GenerationMixin.generate", f"{GEN}/utils.py")]
    assert stage(head + tail) == expected
    # a user's rule still wins over them
    assert stage(head + tail, [("forward", "*server.py:serve")]) == "forward"
