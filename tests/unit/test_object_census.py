"""What grows in a heap: the agent's object census (run here, in this process, as the payload
runs in a target), its message, its recording event, and what the report and memory-growth
make of censuses over time."""

from __future__ import annotations

import json
from pathlib import Path

import msgpack
import pytest

from infertop.agent.payload import memory as memory_module
from infertop.agent.payload.memory import _CensusMixin, object_census
from infertop.analysis.findings import RULES, FindingInput
from infertop.analysis.host_memory import growing_objects, summarize_host_memory
from infertop.cli import main
from infertop.collect.agent.client import convert
from infertop.config import FindingThresholds
from infertop.model.events import TargetInfo
from infertop.model.host_memory import HostMemoryReading, ObjectCensus
from infertop.record.format import decode_event, encode_event
from infertop.record.writer import RecordingWriter

MIB = 1024**2

#: a module global the census finds by name (``tests.unit.test_object_census.KEPT`` or the
#: module's name as imported)
KEPT: list[bytes] = []


class Request:
    def __init__(self, i: int) -> None:
        self.i = i


def test_the_census_counts_types_and_names_the_growing_list(monkeypatch) -> None:  # noqa: ANN001
    # a test worker's heap (torch, transformers and every test module before this one) holds
    # more long lists than the 20 a census sends: which are longest depends on what ran before
    # in the worker. The limits guard a target's time; here they are raised so that the
    # census's reading, not the heap's luck, is what the test checks
    import infertop.agent.payload.memory as census_module

    monkeypatch.setattr(census_module, "CENSUS_CONTAINERS", 100_000)
    monkeypatch.setattr(census_module, "CENSUS_NAME_ENTRIES", 10_000_000)
    held = []
    names: dict[int, str] = {}
    censuses = []
    try:
        for _ in range(3):
            KEPT.extend(bytes(1000) for _ in range(500))
            held.extend(Request(i) for i in range(1000))
            msg, names = object_census(names)
            censuses.append(msg)
    finally:
        KEPT.clear()
    msg = censuses[-1]
    assert msg["type"] == "census" and msg["objects"] > 3000 and msg["cost_s"] > 0
    mine = [c for c in msg["containers"] if c[0] == id(KEPT)]
    (key, kind, n, size, name) = mine[0]
    assert (kind, n) == ("list", 1500) and name is not None and name.endswith(".KEPT")
    assert 1500 * 1000 <= size < 1500 * 1200  # the items' bytes, estimated from a few
    types = dict(msg["types"])
    assert types[f"{__name__}.Request"] >= 3000
    # the message, as the client reads it, and as a recording keeps it
    (ev,) = convert(json.loads(json.dumps(msg)))
    assert isinstance(ev, ObjectCensus) and ev.pid == 0 and ev.objects == msg["objects"]
    assert (key, "list", 1500, size, name) in ev.containers
    assert decode_event(msgpack.unpackb(msgpack.packb(encode_event(ev)))) == ev


def census(t: float, containers=(), types=()) -> ObjectCensus:  # type: ignore[no-untyped-def]
    return ObjectCensus(t, 0, 100_000, 0.01, tuple(types), tuple(containers))


def test_what_grows_over_censuses() -> None:
    cs = [
        census(
            1000.0 + 10 * k,
            [
                (1, "list", 200 + 200 * k, (200 + 200 * k) * 25_000, "__main__.kept"),  # a leak
                (
                    2,
                    "dict",
                    400 + min(k, 1) * 400,
                    (400 + min(k, 1) * 400) * 500,
                    "app.cache",
                ),  # fills
                (3, "dict", 5000, 10**6, "sys.modules"),  # flat
            ],
            [("__main__.Request", 1000 + 1000 * k), ("dict", 20_000 + (k % 2) * 900)],
        )
        for k in range(5)
    ]
    got = growing_objects(cs)
    assert [(g.what, g.type, g.name) for g in got] == [
        ("container", "list", "__main__.kept"),
        ("objects", "__main__.Request", None),
    ]
    kept, req = got
    assert kept.count_per_s == pytest.approx(20.0) and kept.bytes_per_s == pytest.approx(500_000)
    assert (kept.count_first, kept.count_last, kept.censuses) == (200, 1000, 5)
    assert req.count_per_s == pytest.approx(100.0)
    # too few censuses, or too short a time: nothing said
    assert growing_objects(cs[:2]) == ()
    assert growing_objects([census(1000.0 + k, cs[0].containers) for k in range(5)]) == ()


def _leak(seconds: int = 45) -> list[HostMemoryReading]:
    return [
        HostMemoryReading(1000.0 + k, 7, 400 * MIB + 500_000 * k, None, None, None, 0, 0, 0)
        for k in range(seconds + 1)
    ]


def test_the_report_and_the_finding_name_what_grows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cs = [
        census(1002.0 + 10 * k, [(1, "list", 200 + 200 * k, (200 + 200 * k) * 25_000, "__main__.kept")],
               [("__main__.Request", 1000 + 1000 * k)])
        for k in range(5)
    ]  # fmt: skip
    s = summarize_host_memory(_leak(), censuses={7: cs})
    assert s is not None
    f = RULES["memory-growth"](FindingInput(host_memory=s.processes), FindingThresholds())
    assert f is not None
    assert f.where == (
        "__main__.kept (a list, +20.0 items/s)",
        "__main__.Request (+100.0 objects/s)",
    )
    assert "; growing: __main__.kept (a list, +20.0 items/s)" in f.title
    assert f.evidence["growing"][0]["bytes_per_s"] == 500_000
    # through a recording: the agent's censuses are the target's (pid 0)
    path = str(tmp_path / "c.infertop")
    w = RecordingWriter(path)
    events = sorted([*_leak(), *cs], key=lambda e: e.t)
    w.write([TargetInfo(7, "python serve.py", "3.12.1", None, 1000.0), *events])
    w.close()
    capsys.readouterr()
    assert main(["report", path, "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    (g, r) = rep["memory"]["growing"]
    assert g == {"pid": 7, "what": "container", "type": "list", "name": "__main__.kept",
                 "count": 1000, "count_first": 200, "count_per_s": 20.0, "bytes": 25_000_000,
                 "bytes_per_s": 500_000.0, "censuses": 5}  # fmt: skip
    assert r["type"] == "__main__.Request" and r["what"] == "objects"
    assert rep["memory"]["processes"][0]["growing"][0]["name"] == "__main__.kept"
    (found,) = [x for x in rep["findings"] if x["rule"] == "memory-growth"]
    assert found["where"][0].startswith("__main__.kept")
    assert main(["report", path]) == 0
    text = capsys.readouterr().out
    assert "    growing: __main__.kept (list): 200 → 1,000 items, +20.0/s, ~488.3 KiB/s" in text


def test_the_memory_panel_says_what_grows() -> None:
    from infertop.analysis.snapshot import Snapshot
    from infertop.tui.widgets.memory import render_memory

    cs = [
        census(1002.0 + 10 * k, [(1, "list", 200 + 200 * k, None, "__main__.kept")])
        for k in range(5)
    ]
    snap = Snapshot(
        t=0.0, t_first=0.0, target=TargetInfo(7), totals=(), recent=(), history=(), flame=None,  # type: ignore[arg-type]
        stage_filter=None, top=(), statuses=(), samples=0, errors=0, lag_s=0.0, rate_hz=0.0,
        coverage=0.0, exited=None, host_memory=summarize_host_memory(_leak(), censuses={7: cs}),
    )  # fmt: skip
    lines = render_memory(snap, 80).plain.splitlines()
    assert lines[2].startswith("growth +") and lines[2].endswith("· __main__.kept +20 items/s")
    assert len(lines) == 4  # on the growth row: the panel keeps its height


class _Watched(list):
    """A list whose own hooks report being asked: the census must not run a target's code."""

    asked: list[str] = []

    def __len__(self) -> int:
        _Watched.asked.append("__len__")
        return super().__len__()

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        _Watched.asked.append("__getitem__")
        return super().__getitem__(i)

    @property
    def __class__(self):  # type: ignore[no-untyped-def]
        _Watched.asked.append("__class__")
        return list


WATCHED = _Watched(range(5000))


def test_the_census_runs_none_of_the_target_s_code_and_warns_nothing() -> None:
    """A census reads its objects through the builtins' own methods: a subclass's ``__len__``,
    ``__getitem__`` and ``__class__`` are not asked, and a deprecated object's wrapper
    (torch's ``torch.distributed.reduce_op``, which warned on the target's stderr at each look)
    says nothing."""
    import warnings

    torch = pytest.importorskip("torch")
    import torch.distributed  # noqa: F401  (its deprecated reduce_op is a module global)

    assert torch.distributed is not None
    _Watched.asked.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        msg, _names = object_census()
    assert [str(w.message) for w in seen] == []
    assert _Watched.asked == []
    assert any(c[2] == 5000 for c in msg["containers"]), msg["containers"][:5]



class _CensusAgent(_CensusMixin):
    """The census mixin with what it uses of the agent: ``_send`` and ``_status_once``."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self._init_census()

    def _send(self, msg: dict) -> None:
        self.sent.append(msg)

    def _status_once(self, key: str, state: str, message: str) -> None:
        self.sent.append({"type": "status", "state": state, "message": message})


@pytest.mark.parametrize("limit_s", [0.0, 10.0])
def test_censuses_stop_once_a_read_of_the_heap_held_the_gil_too_long(monkeypatch, limit_s) -> None:  # noqa: ANN001
    """Each read of the heap holds the GIL at once (safe_reads.py): a census whose longest read
    held it over the limit is the last, and a status says why; under it they go on."""
    import time

    monkeypatch.setattr(memory_module, "CENSUS_MAX_HOLD_S", limit_s)
    agent = _CensusAgent()
    agent._start_census(0.0)
    agent._tick_census(time.monotonic() + 60)
    kinds = [m["type"] for m in agent.sent]
    assert kinds[0] == "census" and agent.sent[0]["hold_s"] > 0
    if limit_s == 0.0:
        assert agent.next_census == float("inf")
        assert "held the GIL" in agent.sent[1]["message"]
    else:
        assert agent.next_census < float("inf") and kinds == ["census"]
