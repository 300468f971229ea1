from __future__ import annotations

import pytest

from infertop.config import load_config
from infertop.errors import UsageError


def test_toml_config(tmp_path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[collect]\nrate = 50\n[stages]\npreprocess = ["*server.py:encode_batch"]\nretrieval = "*/faiss/*:*"\n')
    cfg = load_config(str(p)).with_stage_args(["serialize=to_wire"])
    assert cfg.collect.rate_hz == 50
    assert cfg.stage_rules[0] == ("serialize", "to_wire")
    assert ("retrieval", "*/faiss/*:*") in cfg.stage_rules
    assert cfg.collect.realtime is False  # py-spy at normal priority unless asked


def test_realtime_is_asked_for_with_true_and_nothing_else(tmp_path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[collect]\nrealtime = true\n")
    assert load_config(str(p)).collect.realtime is True
    p.write_text("[collect]\nrealtime = 1\n")
    with pytest.raises(UsageError, match="collect.realtime must be true or false"):
        load_config(str(p))


@pytest.mark.parametrize(
    "text",
    ["[collect\n", "[collect]\nrate = -1\n", "[collect]\nrate = 'fast'\n", "stages = 3\n", "[stages]\nx = 3\n"],
)
def test_bad_config_is_a_usage_error(tmp_path, text: str) -> None:
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(UsageError):
        load_config(str(p))


def test_missing_config(tmp_path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_config(str(tmp_path / "none.toml"))


def test_generate_functions_from_the_file_and_the_flag(tmp_path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[generate]\nfunctions = ["*server.py:generate_tokens"]\n')
    cfg = load_config(str(p)).with_generate_args(["my_loop"])
    assert cfg.generate_functions == ("*server.py:generate_tokens", "my_loop")
    # the loops' samples are decode, before the defaults and after nothing else of the user's
    assert ("decode", "my_loop") in cfg.stage_rules and ("decode", "*server.py:generate_tokens") in cfg.stage_rules
    from infertop.commands.wiring import CollectOptions, agent_config

    agent = agent_config(CollectOptions(), cfg)
    assert agent.generate_functions == cfg.generate_functions
    assert agent.message()["generate_functions"] == ["*server.py:generate_tokens", "my_loop"]


@pytest.mark.parametrize("arg", ["", "stage=loop", "file.py:"])
def test_a_bad_generate_pattern_says_how_to_write_one(arg: str) -> None:
    with pytest.raises(UsageError) as e:
        load_config(None).with_generate_args([arg])
    assert "--generate" in str(e.value) and "FILE_GLOB:FUNC_GLOB" in e.value.hint


@pytest.mark.parametrize("text", ['[generate]\nfunctions = 3\n', '[generate]\nloops = ["x"]\n'])
def test_a_bad_generate_table_is_a_usage_error(tmp_path, text: str) -> None:
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(UsageError):
        load_config(str(p))
