"""queue-wait fed from a real session: a worker that waits for its requests in a
``queue.Queue`` most of the time raises it, the same worker kept busy does not."""

from __future__ import annotations

import pytest

from .helpers import ROOT, infertop, report_json, start_target, stop_target

pytestmark = pytest.mark.slow
TARGET = str(ROOT / "tests/integration/targets/queue_loop.py")


@pytest.mark.parametrize("interval_ms,fires", [("20", True), ("1", False)], ids=["waiting", "busy"])
def test_queue_wait_fires_when_the_worker_waits_for_requests(tmp_path, interval_ms: str, fires: bool) -> None:
    target = start_target([TARGET, interval_ms])
    out = str(tmp_path / "q.infertop")
    try:
        p = infertop("record", str(target.pid), "-o", out, "--duration", "8", "--no-inject",
                     "--stage", "forward=*queue_loop.py:forward")  # fmt: skip
        assert p.returncode == 0, p.stderr
    finally:
        stop_target(target)
    rep = report_json(out)
    found = [f for f in rep["findings"] if f["rule"] == "queue-wait"]
    shares = {s["name"]: s["share"] for s in rep["stages"]}
    assert bool(found) == fires, (found, shares)
    if fires:
        # (its share read 0.397 on a loaded run, where the 5 ms forward stretches: the finding's
        # own bar decides, not the test's)
        assert any("wait" in w or "get" in w for w in found[0]["where"]), found[0]["where"]
