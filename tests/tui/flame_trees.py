"""Hand-built flame trees for the icicle and search tests: stacks of function names, each
with a count and a stage, built by the analysis' own ``build_flame``."""

from __future__ import annotations

from infertop.analysis.flame import FlameNode, build_flame
from infertop.model.events import Frame


def frame(name: str) -> Frame:
    return Frame(name, f"/srv/app/{name.split('.')[0].lower()}.py", 10)


def tree(stacks: list[tuple[str, int, str]]) -> FlameNode:
    """``[("main;loop;tokenize", 26, "preprocess"), ...]``: ``;``-separated frames, root
    first (the names' files are ``/srv/app/<first part, lower case>.py``)."""
    frames = [[frame(n) for n in path.split(";")] for path, _, _ in stacks]
    return build_flame(
        [(i, n) for i, (_, n, _) in enumerate(stacks)],
        frames.__getitem__,
        lambda i: stacks[i][2],
    )


def loop_tree(tokenize: int = 26, forward: int = 47, serialize: int = 24) -> FlameNode:
    """A serving loop: tokenize → forward → serialize, plus a little logging."""
    return tree(
        [
            ("main;loop;tokenize;Tokenizer.encode", tokenize, "preprocess"),
            ("main;loop;forward;Linear.forward", forward, "forward"),
            ("main;loop;serialize;dumps", serialize, "serialize"),
            ("main;loop;log", 3, "other"),
        ]
    )


def node(root: FlameNode, path: str) -> FlameNode:
    found = root.find([frame(n) for n in path.split(";")])
    assert found is not None, path
    return found
