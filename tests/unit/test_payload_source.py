"""The payload as one source text: the modules of ``infertop.agent.payload`` joined by
``payload_source()`` must compile and run in an empty namespace without anything of infertop,
and each module must still work as a normal import."""

from __future__ import annotations

import ast
import builtins
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infertop import config
from infertop.agent import payload as PL
from infertop.agent.payload import PARTS, payload_source

PAYLOAD_DIR = Path(PL.__file__).resolve().parent
PROTOCOL = PAYLOAD_DIR.parent / "protocol.py"
START_CALL = "_infertop_agent_start("
IMPORTED = "# -- imported as a module (payload_source leaves these lines out) --"
IMPORTED_END = "# -- end --"
INFERTOP_IMPORT = re.compile(r"^\s*(?:from|import)\s+infertop\b", re.MULTILINE)


def module_code(text: str) -> str:
    """The joined text without its last line, the call that would start an agent."""
    body, call = text.rstrip("\n").rsplit("\n", 1)
    assert call.startswith(START_CALL)
    return body + "\n"


def part_paths() -> list[Path]:
    return [PAYLOAD_DIR / (name + ".py") for name in PARTS]


def test_every_module_of_the_package_is_a_part_and_none_is_too_long():
    on_disk = {p.stem for p in PAYLOAD_DIR.glob("*.py")} - {"__init__"}
    assert on_disk == set(PARTS)
    for path in part_paths():
        assert len(path.read_text().splitlines()) <= 500, path.name


@pytest.mark.parametrize("mode", ["armed", "injected"])
def test_joined_text_imports_nothing_of_infertop(mode):
    text = payload_source(mode=mode, deadline=1.0, boot_file="/nonexistent", idle_exit_s=5)
    assert INFERTOP_IMPORT.search(text) is None
    assert IMPORTED not in text and IMPORTED_END not in text
    assert text.startswith("from __future__ import annotations\n")
    assert text.count("from __future__ import") == 1
    assert text.splitlines()[-1] == (
        f"_infertop_agent_start(mode={mode!r}, deadline=1.0, boot_file='/nonexistent', "
        "free_region=None, idle_exit_s=5.0)"
    )


def test_joined_text_runs_in_an_empty_namespace(monkeypatch):
    """In this process: every import statement the text runs goes through a recording
    ``__import__``, so an import of infertop is seen even though infertop is loaded here."""
    imported = []
    real_import = builtins.__import__

    def recording_import(name, *args, **kwargs):
        imported.append(name)
        return real_import(name, *args, **kwargs)

    code = compile(module_code(payload_source(mode="armed")), "<infertop-agent>", "exec")
    ns = {"__name__": "infertop_payload_test"}
    monkeypatch.setattr(builtins, "__import__", recording_import)
    exec(code, ns)  # noqa: S102 - what arm() does with the text
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert imported, "the text's imports were not seen"
    assert not [n for n in imported if n.split(".")[0] == "infertop"], imported
    assert PL.REGISTRY_KEY not in sys.modules  # defining the agent starts nothing
    for name in ("_infertop_agent_start", "_Agent", "reduce_events", "kineto_events", "send_msg"):
        assert name in ns, name
    # the joined reduction is the imported one
    events = [
        ("cpu_op", "aten::mm", 7, 1_000, 500, 1, 0, 0, None),
        ("cuda_runtime", "cudaLaunchKernel", 7, 1_100, 50, 9, 1, 0, None),
        ("kernel", "gemm", 0, 1_300, 400, 9, 1, 0, None),
    ]
    assert ns["reduce_events"](events, 0.0, 1e-5) == PL.reduce_events(events, 0.0, 1e-5)


SUBPROCESS = r"""
import json, sys, threading
text = sys.stdin.read()
body, call = text.rstrip("\n").rsplit("\n", 1)
before = set(sys.modules)
threads = threading.active_count()
ns = {"__name__": "infertop_payload_test"}
exec(compile(body + "\n", "<infertop-agent>", "exec"), ns)
new = sorted(m for m in set(sys.modules) - before if m.split(".")[0] == "infertop")
print(json.dumps([new, sorted(set(sys.modules) - before), threading.active_count() - threads,
                  "_infertop_agent" in sys.modules, sorted(k for k in ns if not k.startswith("__"))]))
"""


@pytest.mark.slow  # starts a fresh interpreter
def test_joined_text_imports_no_infertop_module_in_a_fresh_interpreter(tmp_path):
    """A fresh, isolated interpreter (``-I``: no PYTHONPATH, no user site, not the working
    directory): no ``infertop`` module appears in ``sys.modules`` by running the text."""
    r = subprocess.run(
        [sys.executable, "-I", "-c", SUBPROCESS],
        input=payload_source(mode="injected"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
        check=False,
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    new_infertop, new_modules, new_threads, registered, names = json.loads(r.stdout)
    assert new_infertop == [], new_infertop
    assert "torch" not in new_modules  # the target's torch is used, never imported
    assert new_threads == 0 and not registered
    assert "_infertop_agent_start" in names and "_Agent" in names


def top_level_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names defined: functions, classes, assignments; names bound by import statements)."""
    defined: set[str] = set()
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        defined.add(n.id)
        elif isinstance(node, ast.Import):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            imported |= {a.asname or a.name for a in node.names}
    return defined, imported


def imported_block(text: str) -> str:
    if IMPORTED not in text:
        return ""
    start = text.index(IMPORTED)
    return text[start : text.index(IMPORTED_END, start)]


def test_parts_share_one_namespace_without_clashes_and_in_order():
    """Once joined the parts share one namespace: no name is defined by two of them (nor by
    protocol.py), and a part uses from the others only names defined before it."""
    owner: dict[str, str] = {}
    sources = [("protocol", PROTOCOL)] + [(p.stem, p) for p in part_paths()]
    for name, path in sources:
        text = path.read_text()
        defined, _ = top_level_names(ast.parse(text))
        for n in defined:
            assert n not in owner, f"{n} is defined by both {owner.get(n)} and {name}"
            owner[n] = name
    order = [name for name, _ in sources]
    for name, path in sources[1:]:
        text = path.read_text()
        block = imported_block(text)
        outside = text.replace(block, "")
        assert INFERTOP_IMPORT.search(outside) is None, name  # only inside the block
        for node in ast.parse(block).body:
            assert isinstance(node, ast.ImportFrom), (name, ast.dump(node))
            source = node.module.rsplit(".", 1)[-1]
            assert node.module in ("infertop.agent.protocol", "infertop.agent.payload." + source)
            assert order.index(source) < order.index(name), (name, node.module)
            for alias in node.names:
                assert alias.asname is None and owner.get(alias.name) == source, (name, alias.name)
        # a stdlib import must not shadow a name another part defines
        _, imports = top_level_names(ast.parse(outside))
        assert not [n for n in imports if n in owner], (name, imports & set(owner))


def test_the_agent_threads_wait_keeps_the_name_infertop_counts_as_idle():
    from infertop.agent.payload.agent import _Agent

    assert "<infertop-agent>:" + _Agent._wait_for_io.__qualname__ in config.WAIT_FRAMES
