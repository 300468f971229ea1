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
