"""The agent's reading of vLLM's scheduler on the installed vLLM (``.venv-vllm``, made by
scripts/vllm/setup.sh; CI does not install it): vLLM's own ``StatLoggerManager.record``, its own
``SchedulerStats`` and ``IterationStats``, timed by the agent's real ``sys.monitoring`` timer as
the known entry point it finds in the loaded module. A whole server takes 35-80 s to start, so
the server itself is ``make bench-vllm``'s (docs/performance.md); this checks, in seconds, that
the names the agent reads are the installed vLLM's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .helpers import ROOT

pytestmark = pytest.mark.slow
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"

PROBE = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
from vllm.v1.metrics.loggers import StatLoggerManager
from vllm.v1.metrics.stats import IterationStats, PrefixCacheStats, SchedulerStats
from infertop.agent.payload import engine_stats, stages
from infertop.agent.payload.monitor import _Monitor

found = {c: v for c, v in stages.find_known_codes([]).items() if v[1] == "vllm_stats"}
assert list(found) == [StatLoggerManager.record.__code__], found
timed = []
mon = _Monitor({c: v[0] for c, v in found.items()}, lambda *a: timed.append(a),
               {c: stages._CALL_FILTERS["vllm_stats"] for c in found})
mon.install()
mgr = object.__new__(StatLoggerManager)  # its loggers are not what is tested
mgr.stat_loggers = []
for k in range(6):
    it = IterationStats()
    it.num_generation_tokens = 3
    it.num_preempted_reqs = 1 if k == 4 else 0
    it.prompt_token_stats.total = 9 if k < 2 else 0
    sched = SchedulerStats(num_running_reqs=3, num_waiting_reqs=2 if k < 3 else 0,
                           num_skipped_waiting_reqs=1, kv_cache_usage=0.05 * k,
                           prefix_cache_stats=PrefixCacheStats(queries=10, hits=4))
    mgr.record(scheduler_stats=sched, iteration_stats=it, engine_idx=0)
mgr.record(None, None)  # outputs without stats: nothing
mon.uninstall()
print(json.dumps({"rows": engine_stats.take_engine_stats(last=True), "timed": len(timed)}))
'''


def test_the_agent_reads_the_installed_vllm_s_scheduler_stats(tmp_path: Path) -> None:
    if not VLLM_PYTHON.exists():
        pytest.skip("no vLLM venv here (.venv-vllm: scripts/vllm/setup.sh, make bench-vllm)")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    out = subprocess.run([str(VLLM_PYTHON), str(probe), str(ROOT)], capture_output=True,
                         text=True, timeout=180)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["timed"] == 0  # read, not timed as a stage
    (row,) = got["rows"]
    assert row["steps"] == 6 and row["running"] == [[3, 6]]
    assert row["waiting"] == [[1, 3], [3, 3]]  # waiting + deferred, as vLLM's gauge counts
    assert [v for v, _ in row["kv_usage"]] == [0, 5, 10, 15, 20, 25] and row["kv_usage_max"] == 0.25
    assert (row["preempted"], row["prompt_tokens"], row["generation_tokens"]) == (1, 18, 18)
    assert (row["prefix_queries"], row["prefix_hits"]) == (60, 24)
    assert row["running_s"] == pytest.approx(3 * row["held_s"])
