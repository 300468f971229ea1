"""What `infertop record` costs a real vLLM server, and whether what it reports is true.

A vLLM OpenAI API server on the CPU (scripts/vllm/setup.sh builds its venv and a tiny random-weight
Llama; scripts/vllm/serve.sh starts it) is driven by a few client threads streaming
/v1/completions. The same load runs in phases:

  alone      the server alone for --alone seconds
  recorded   while `infertop record API_PID --children --duration D -o FILE --json` runs (no other
             flag); measured from record's launch to its exit (injection and stop included);
             the client numbers also for record's parts: attach (launch to its first progress
             line), steady (first to last progress line), stop (last progress line to exit)
  after      (--after S > 0) alone again, to see drift and anything left behind in the target

Per phase: client-side throughput and p50 of time to first token (first streamed chunk that
carries a token), request latency, time per output token (the rest of the request over the
tokens after the first; small when the API server sends tokens in bunches: see chunks/request);
vLLM's own means over the window from /metrics (differences of the histograms' _sum and
_count); the CPU each server process used, and how long its threads waited for a CPU. Then a
table (alone | recorded | ratio recorded/alone | after | record's parts), and what `infertop
report FILE --format json` says: processes and roles, stage shares per process, findings,
requests and generation. The recording, the report JSON and a summary JSON go to --out.

    .venv/bin/python benchmarks/bench_vllm.py                      # starts and stops a server
    .venv/bin/python benchmarks/bench_vllm.py --port 8765 --api-pid 1234   # a running one

Run with the project's .venv (infertop installed there); the client uses only the standard
library. A server this script starts is always stopped, its whole process tree, at the end
(SIGTERM, then SIGKILL by pid for what survives); a server given with --port is left running
unless --stop-server. One run with the defaults takes about 2 minutes on 2 cores (the server's
start-up: 35 s warm, ~65 s the first time after install). Numbers on a 2-core VM swing by 10 % or more from one minute to the next: read ratios
near 1 as "no visible harm", not as a measurement of a few percent.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVE = ROOT / "scripts" / "vllm" / "serve.sh"
DEFAULT_MODEL = ROOT / ".venv-vllm" / "tiny-llama"

PROMPTS = [
    "The model reads a prompt and",
    "Tell me about the river in the city",
    "One two three four five",
    "The server has a queue of requests, and the worker",
    "A small bird sat on the old tree",
    "Write a short answer to the question",
    "Yesterday morning the cache was",
    "Many tokens stream from the engine to",
]

HISTOGRAMS = {
    "e2e": "vllm:e2e_request_latency_seconds",
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "tpot": "vllm:time_per_output_token_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
}
COUNTERS = {
    "requests": "vllm:request_success_total",
    "gen_tokens": "vllm:generation_tokens_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "preemptions": "vllm:num_preemptions_total",
}
#: vLLM's scheduler gauges, polled while record runs, against the report's ``engine``
GAUGES = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "kv_usage": "vllm:kv_cache_usage_perc",
}
CLK = os.sysconf("SC_CLK_TCK")


# -- processes (via /proc, so this needs nothing outside the standard library) ---------------
def proc_table() -> dict[int, int]:
    """pid -> ppid of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        out[int(d)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    return out


def descendants(root: int) -> list[int]:
    table = proc_table()
    kids: dict[int, list[int]] = {}
    for pid, ppid in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for k in sorted(kids.get(todo.pop(0), [])):
            out.append(k)
            todo.append(k)
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    f = stat[stat.rindex(")") + 2 :].split()
    return (int(f[11]) + int(f[12])) / CLK  # utime + stime


def runq_wait(pid: int) -> float | None:
    """Seconds the process's threads have waited on a run queue (ready, not running), summed
    over the threads alive now (/proc/PID/task/TID/schedstat, field 2)."""
    total, seen = 0.0, False
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[1]) / 1e9
                seen = True
        except (OSError, IndexError, ValueError):
            continue
    return total if seen else None


def machine_busy() -> float:
    """CPU seconds all CPUs have been busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:]]
    return (sum(f[:8]) - f[3] - f[4]) / CLK


def own_cpu() -> float:
    """Our CPU seconds and our waited-for children's (infertop record and its py-spy)."""
    a = resource.getrusage(resource.RUSAGE_SELF)
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pid_listening_on(port: int) -> int | None:
    """The process with a listening TCP socket on ``port`` (the API server), from /proc."""
    inodes = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                next(fh)
                for line in fh:
                    f = line.split()
                    if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f[9])
        except OSError:
            continue
    for pid in sorted(proc_table()):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return pid
        except OSError:
            continue
    return None


def role_of(pid: int, api_pid: int) -> str:
    if pid == api_pid:
        return "api"
    c = cmdline(pid)
    if "EngineCore" in c:
        return "engine"
    if "Worker" in c:
        return "worker"
    if "resource_tracker" in c:
        return "tracker"
    return "other"


def kill_tree(root: int, grace: float = 10.0) -> list[int]:
    """Stop ``root`` and its descendants: SIGTERM to ``root`` alone first (vLLM's API server then
    shuts its engine core and worker down in order), after ``grace`` seconds SIGTERM to the
    descendants still there, after 3 more SIGKILL by pid to whatever is left. Returns the pids
    that needed SIGKILL."""
    pids = [root] + descendants(root)

    def wait(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            pids.extend(p for p in descendants(root) if p not in pids)  # started while stopping
            time.sleep(0.2)

    def send(sig: int, targets: list[int]) -> list[int]:
        sent = []
        for pid in targets:
            if alive(pid):
                try:
                    os.kill(pid, sig)
                    sent.append(pid)
                except OSError:
                    pass
        return sent

    send(signal.SIGTERM, [root])
    wait(grace)
    send(signal.SIGTERM, pids)
    wait(3.0)
    return send(signal.SIGKILL, pids)


# -- the server's own numbers -----------------------------------------------------------------
def scrape(port: int) -> dict[str, float]:
    """Every sample of /metrics summed over its labels: {'name_sum': v, 'name_count': v, ...}."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m:
            continue
        try:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
        except ValueError:
            pass
    return out


def metric_means(before: dict[str, float], after: dict[str, float], seconds: float) -> dict:
    """vLLM's window means (ms) and rates from two scrapes."""
    out: dict[str, float | None] = {}
    for key, name in HISTOGRAMS.items():
        n = after.get(name + "_count", 0.0) - before.get(name + "_count", 0.0)
        s = after.get(name + "_sum", 0.0) - before.get(name + "_sum", 0.0)
        out[f"vllm_{key}_ms"] = 1000 * s / n if n > 0 else None
    for key, name in COUNTERS.items():
        if name in after:
            out[f"vllm_{key}_per_s"] = (after[name] - before.get(name, 0.0)) / seconds
    return out


# -- the load -----------------------------------------------------------------------------------
class Load:
    """``clients`` threads, each streaming one /v1/completions after another."""

    def __init__(self, port: int, model: str, clients: int, max_tokens: int) -> None:
        self.port, self.model, self.max_tokens = port, model, max_tokens
        self.records: list[dict] = []
        self.errors: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)
        ]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)

    def one(self, prompt: str) -> dict:
        body = json.dumps(
            {
                "model": self.model,
                "prompt": prompt,
                "max_tokens": self.max_tokens,
                "temperature": 0.8,
                "stream": True,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
            }
        )
        t0 = time.time()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
            ttft = None
            chunks = 0
            tokens = None
            while True:
                line = resp.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                doc = json.loads(data)
                if doc.get("choices"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.time() - t0
                if doc.get("usage"):
                    tokens = doc["usage"].get("completion_tokens")
        finally:
            conn.close()
        end = time.time()
        if ttft is None:
            raise RuntimeError("no token streamed")
        return {
            "start": t0,
            "end": end,
            "ttft": ttft,
            "latency": end - t0,
            "tokens": tokens if tokens is not None else chunks,
            "chunks": chunks,
        }

    def _client(self, i: int) -> None:
        n = i
        while not self.stop.is_set():
            try:
                rec = self.one(PROMPTS[n % len(PROMPTS)])
                with self.lock:
                    self.records.append(rec)
            except Exception as e:  # noqa: BLE001 - a failed request is counted, not fatal
                with self.lock:
                    self.errors.append((time.time(), f"{type(e).__name__}: {e}"))
                time.sleep(0.5)
            n += len(self.threads)

    def window(self, t0: float, t1: float) -> dict:
        """Client numbers of the requests that ended within [t0, t1] (Unix time)."""
        with self.lock:
            recs = [r for r in self.records if t0 <= r["end"] <= t1]
            errs = sum(1 for t, _ in self.errors if t0 <= t <= t1)
        secs = t1 - t0

        def p50(xs: list[float]) -> float | None:
            return 1000 * statistics.median(xs) if xs else None

        tpot = [(r["latency"] - r["ttft"]) / (r["tokens"] - 1) for r in recs if r["tokens"] > 1]
        return {
            "seconds": secs,
            "requests": len(recs),
            "errors": errs,
            "req_per_s": len(recs) / secs if secs > 0 else None,
            "tokens_per_s": sum(r["tokens"] for r in recs) / secs if secs > 0 else None,
            "ttft_p50_ms": p50([r["ttft"] for r in recs]),
            "latency_p50_ms": p50([r["latency"] for r in recs]),
            "tpot_p50_ms": p50(tpot),
            "latency_max_ms": 1000 * max(r["latency"] for r in recs) if recs else None,
            "chunks_per_req": statistics.mean(r["chunks"] for r in recs) if recs else None,
        }


# -- phases ---------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace, port: int, api_pid: int, model: str) -> None:
        self.args, self.port, self.api_pid = args, port, api_pid
        self.load = Load(port, model, args.clients, args.max_tokens)

    def server_procs(self) -> dict[int, str]:
        pids = [self.api_pid] + descendants(self.api_pid)
        return {p: role_of(p, self.api_pid) for p in pids}

    def cpu(self) -> dict:
        """The server processes' CPU seconds by pid, and the machine's and our own under
        "busy"/"own"."""
        procs = self.server_procs()
        out: dict = {p: c for p in procs if (c := cpu_seconds(p)) is not None}
        out["busy"], out["own"] = machine_busy(), own_cpu()
        out["runq"] = {p: w for p in [*procs, os.getpid()] if (w := runq_wait(p)) is not None}
        return out

    def measure(self, name: str, seconds: float) -> dict:
        """The load alone for ``seconds``."""
        c0, m0, t0 = self.cpu(), scrape(self.port), time.time()
        time.sleep(seconds)
        c1, m1, t1 = self.cpu(), scrape(self.port), time.time()
        return self._numbers(name, t0, t1, m0, m1, c0, c1)

    def _numbers(self, name, t0, t1, m0, m1, c0, c1) -> dict:
        out = {"phase": name, "t0": t0, "t1": t1, **self.load.window(t0, t1)}
        out.update(metric_means(m0, m1, t1 - t0))
        roles = self.server_procs()
        secs = t1 - t0
        by_role: dict[str, float] = {}
        for pid, c in c1.items():
            if isinstance(pid, int) and pid in c0:
                r = roles.get(pid, "other")
                by_role[r] = by_role.get(r, 0.0) + (c - c0[pid]) / secs
        # the rest of the machine: busy CPU that was neither the server's nor ours (this
        # client and infertop): other people's work, which makes a phase slower on its own
        own = (c1["own"] - c0["own"]) / secs
        by_role["bench+infertop"] = own
        by_role["rest of machine"] = (c1["busy"] - c0["busy"]) / secs - sum(by_role.values())
        out["cpu_cores"] = by_role
        # run-queue wait: threads ready to run but not given a CPU (seconds per second, all the
        # process's threads together); "client" is this script's client threads
        waits: dict[str, float] = {}
        for pid, w in c1["runq"].items():
            if pid in c0["runq"]:
                r = "client" if pid == os.getpid() else roles.get(pid, "other")
                waits[r] = waits.get(r, 0.0) + max(0.0, w - c0["runq"][pid]) / secs
        out["runq_wait"] = waits
        return out

    def recorded(self, rec_path: Path, log_path: Path) -> tuple[dict, list[dict], dict]:
        """The load while `infertop record` runs: (launch..exit numbers, the client numbers of
        record's parts, what record did)."""
        infertop = shutil.which("infertop", path=str(Path(sys.executable).parent)) or "infertop"
        cmd = (["nice", "-n", str(self.args.nice)] if self.args.nice else []) + [
            infertop,
            "record",
            str(self.api_pid),
            "--children",
            "--duration",
            f"{self.args.duration:g}",
            "-o",
            str(rec_path),
            "--json",
            *self.args.record_args.split(),
        ]
        lines: list[tuple[float, str]] = []
        c0, m0 = self.cpu(), scrape(self.port)
        gauges: list[dict[str, float]] = []
        polled = threading.Event()

        def poll() -> None:  # vLLM's gauges every 0.5 s, for the engine's comparison
            while not polled.wait(0.5):
                t = time.time()
                try:
                    m = scrape(self.port)
                except OSError:
                    continue
                row = {k: m[name] for k, name in GAUGES.items() if name in m}
                row.update({"t": time.time(), "took": time.time() - t})
                row.update({k: m[n] for k, n in COUNTERS.items() if n in m})
                gauges.append(row)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def read(stream, tag: str) -> None:
            for line in stream:
                lines.append((time.time(), f"{tag}{line.rstrip()}"))

        readers = [
            threading.Thread(target=read, args=(proc.stderr, ""), daemon=True),
            threading.Thread(target=read, args=(proc.stdout, "stdout: "), daemon=True),
        ]
        for r in readers:
            r.start()
        try:
            rc = proc.wait(timeout=self.args.duration + self.args.record_grace)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # record closes the file on SIGINT
            try:
                rc = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            lines.append(
                (time.time(), f"(bench: record overran its {self.args.record_grace:g} s grace)")
            )
        t1 = time.time()
        polled.set()
        poller.join(timeout=10)
        for r in readers:
            r.join(timeout=5)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        c1, m1 = self.cpu(), scrape(self.port)
        log_path.write_text("".join(f"{t - t0:8.3f} {line}\n" for t, line in lines))

        progress = [(t, line) for t, line in lines if '"elapsed_s"' in line]
        end = [(t, line) for t, line in lines if '"end"' in line]
        info = {
            "cmd": " ".join(cmd),
            "rc": rc,
            "wall_s": t1 - t0,
            "first_progress_s": progress[0][0] - t0 if progress else None,
            "end_line_s": end[0][0] - t0 if end else None,
            "cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
            "max_rss_mib": ru1.ru_maxrss / 1024,
            "stderr": [line for _, line in lines],
        }
        info["cpu_cores"] = info["cpu_s"] / info["wall_s"]
        info["gauges"] = {
            k: {"p50": statistics.median(xs), "mean": statistics.fmean(xs), "max": max(xs), "polls": len(xs)}
            for k in GAUGES
            if (xs := [g[k] for g in gauges if k in g])
        }
        info["polls"] = gauges
        whole = self._numbers("recorded", t0, t1, m0, m1, c0, c1)
        # record's own parts: attaching (launch to its first progress line), the steady
        # recording (first to last progress line) and stopping (last progress line to exit)
        parts = []
        if progress:
            a, b = progress[0][0], progress[-1][0]
            for name, u, v in (("rec: attach", t0, a), ("rec: steady", a, b), ("rec: stop", b, t1)):
                if v - u > 0.5:
                    parts.append({"phase": name, "t0": u, "t1": v, **self.load.window(u, v)})
        return whole, parts, info


# -- output -----------------------------------------------------------------------------------
ROWS = [
    ("req_per_s", "client requests/s", "{:.2f}"),
    ("tokens_per_s", "client tokens/s", "{:.1f}"),
    ("ttft_p50_ms", "client TTFT p50 ms", "{:.1f}"),
    ("latency_p50_ms", "client request p50 ms", "{:.1f}"),
    ("tpot_p50_ms", "client TPOT p50 ms", "{:.2f}"),
    ("latency_max_ms", "client request max ms", "{:.1f}"),
    ("chunks_per_req", "client chunks/request", "{:.1f}"),
    ("requests", "requests in window", "{:d}"),
    ("errors", "failed requests", "{:d}"),
    ("vllm_requests_per_s", "vLLM requests/s", "{:.2f}"),
    ("vllm_gen_tokens_per_s", "vLLM gen tokens/s", "{:.1f}"),
    ("vllm_e2e_ms", "vLLM e2e mean ms", "{:.1f}"),
    ("vllm_ttft_ms", "vLLM TTFT mean ms", "{:.1f}"),
    ("vllm_itl_ms", "vLLM inter-token mean ms", "{:.2f}"),
    ("vllm_tpot_ms", "vLLM TPOT mean ms", "{:.2f}"),
    ("vllm_queue_ms", "vLLM queue mean ms", "{:.2f}"),
    ("vllm_prefill_ms", "vLLM prefill mean ms", "{:.2f}"),
    ("vllm_decode_ms", "vLLM decode mean ms", "{:.1f}"),
    ("seconds", "window s", "{:.1f}"),
]


def fmt(v, spec: str) -> str:
    if v is None:
        return "-"
    try:
        return spec.format(v)
    except ValueError:
        return str(v)


def table(phases: list[dict]) -> str:
    base = phases[0]
    rec = phases[1]
    head = [
        "",
        *[p["phase"] for p in phases[:2]],
        "ratio rec/alone",
        *[p["phase"] for p in phases[2:]],
    ]
    rows = [head]
    keys = [
        (k, label, spec) for k, label, spec in ROWS if any(p.get(k) is not None for p in phases)
    ]
    roles = list(dict.fromkeys(r for p in phases for r in p.get("cpu_cores", {})))
    for k, label, spec in keys:
        a, b = base.get(k), rec.get(k)
        ratio = (
            f"{b / a:.3f}"
            if isinstance(a, (int, float))
            and isinstance(b, (int, float))
            and a
            and k not in ("requests", "seconds", "errors")
            else "-"
        )
        rows.append(
            [label, fmt(a, spec), fmt(b, spec), ratio, *[fmt(p.get(k), spec) for p in phases[2:]]]
        )
    for r in roles:
        vals = [p.get("cpu_cores", {}).get(r) for p in phases]
        a, b = vals[0], vals[1]
        ratio = f"{b / a:.3f}" if a and b is not None else "-"
        rows.append(
            [
                f"CPU cores: {r}",
                fmt(a, "{:.2f}"),
                fmt(b, "{:.2f}"),
                ratio,
                *[fmt(v, "{:.2f}") for v in vals[2:]],
            ]
        )
    for r in list(dict.fromkeys(r for p in phases for r in p.get("runq_wait", {}))):
        vals = [p.get("runq_wait", {}).get(r) for p in phases]
        a, b = vals[0], vals[1]
        ratio = f"{b / a:.3f}" if a and b is not None else "-"
        rows.append(
            [
                f"run-queue wait s/s: {r}",
                fmt(a, "{:.3f}"),
                fmt(b, "{:.3f}"),
                ratio,
                *[fmt(v, "{:.3f}") for v in vals[2:]],
            ]
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(r, widths))
        )
        for r in rows
    )


def summarize_report(rep: dict) -> list[str]:
    out = []
    src = rep.get("target") or {}
    out.append(
        f"report schema {rep.get('infertop_report')}, duration {rep.get('duration_s')} s, "
        f"target pid {src.get('pid')} python {src.get('python')} torch {src.get('torch')}"
    )
    out.append(
        "stages (all processes merged): "
        + ", ".join(
            f"{s['name']} {100 * s['share']:.1f}% wall / {100 * s['cpu_share']:.1f}% cpu"
            for s in rep.get("stages") or []
        )
    )
    for p in rep.get("processes") or []:
        out.append(
            f"process pid {p['pid']} role {p['role']!r}: {p['samples']} samples"
            + (
                f", exited after {p['exited_after_s']} s"
                if p.get("exited_after_s") is not None
                else ""
            )
            + f"  [{(p.get('cmdline') or '?')[:70]}]"
        )
        out.append(
            "    stages: "
            + (
                ", ".join(f"{s['name']} {100 * s['share']:.1f}%" for s in p.get("stages") or [])
                or "(none)"
            )
        )
        if p.get("ops"):
            out.append(f"    ops: {json.dumps(p['ops'])[:300]}")
        for f in p.get("findings") or []:
            out.append(f"    finding [{f['severity']}] {f['rule']}: {f['title']}")
    if rep.get("processes") is None:
        out.append("processes: null (the report saw one process)")
    for f in rep.get("findings") or []:
        out.append(f"finding [{f['severity']}] {f['rule']}: {f['title']}")
    if not rep.get("findings"):
        out.append("findings: none")
    for key in ("requests", "generation", "engine", "event_loop", "gc"):
        val = rep.get(key)
        text = json.dumps(val)
        out.append(f"{key}: {text if len(text) <= 1200 else text[:1200] + ' ...'}")
    return out


def scheduler_span(path: Path) -> tuple[float, float] | None:
    """The first and last step of the engine's scheduler the recording read (unix s); None
    without. Reads infertop's recording reader, as ``collector_notes`` does."""
    try:
        from infertop.model.engine import EngineStats
        from infertop.record.reader import read_recording

        es = [e for e in read_recording(str(path)).events if isinstance(e, EngineStats)]
    except Exception:  # noqa: BLE001 - a diagnostic only
        return None
    return (min(e.t_start for e in es), max(e.t_end for e in es)) if es else None


def same_window(polls: list[dict], span: tuple[float, float] | None) -> str:
    """vLLM's counters and gauges from the polls inside the steps the recording read: the
    counters' differences between the first and last such poll, per second, and the gauges'
    means: the same window as the report's rates."""
    if span is None:
        return "same window: no scheduler steps in the recording"
    inside = [p for p in polls if span[0] <= p["t"] <= span[1]]
    if len(inside) < 2:
        return "same window: fewer than two polls inside it"
    a, b = inside[0], inside[-1]
    secs = b["t"] - a["t"]
    cells = [f"{k} {(b[k] - a[k]) / secs:.3g}/s" for k in COUNTERS if k in a and k in b]
    cells += [f"{k} mean {statistics.fmean(p[k] for p in inside):.3g}" for k in GAUGES if k in a]
    return f"vLLM over the steps read ({len(inside)} polls, {secs:.1f} s): " + ", ".join(cells)


def engine_against_metrics(e: dict | None, gauges: dict, whole: dict) -> str:
    """The report's scheduler fields beside vLLM's /metrics over the recorded phase: its gauges
    polled every 0.5 s (p50, mean and max of the polls: a poll sees the state over time, ours is
    per step, and our mean over time is the one to set beside the polls' mean) and its counters'
    rates (over record's launch to exit, ours over the steps read)."""
    if not e or e.get("waiting") is None:
        return "engine vs /metrics: the report has no scheduler state"
    kv = e.get("kv_cache") or {}
    means = e.get("time_means") or {}
    ours = {"running": e["running"], "waiting": e["waiting"],
            "kv_usage": {"p50": kv.get("usage_p50"), "max": kv.get("usage_max")}}  # fmt: skip
    cells = []
    for k in GAUGES:
        g = gauges.get(k)
        theirs = f"{g['p50']:g}/{g['mean']:.4g}/{g['max']:g} ({g['polls']} polls)" if g else "-"
        cells.append(
            f"{k} p50/mean/max ours {ours[k]['p50']:g} per step/{means.get(k, float('nan')):.4g} "
            f"over time/{ours[k]['max']:g}, vLLM {theirs}"
        )
    cells.append(
        f"tokens/s ours {e.get('prompt_tokens_per_s')} prompt {e.get('generation_tokens_per_s')} "
        f"generated, vLLM {fmt(whole.get('vllm_prompt_tokens_per_s'), '{:.1f}')} prompt "
        f"{fmt(whole.get('vllm_gen_tokens_per_s'), '{:.1f}')} generated"
    )
    cells.append(
        f"preemptions ours {e.get('preemptions')}, vLLM "
        f"{fmt(whole.get('vllm_preemptions_per_s'), '{:.3f}')}/s"
    )
    return "engine vs /metrics: " + "; ".join(cells)


def collector_notes(path: Path) -> None:
    """What the recording says about its collectors (py-spy failures and the like) and its
    sample windows. Reads infertop's internal recording reader, so it may break when that
    changes: it only prints, and says so when it cannot."""
    try:
        from infertop.record.reader import read_recording

        rec = read_recording(str(path))
        wins = []
        for e in rec.events:
            name = type(e).__name__
            if (
                name == "CollectorStatus"
                and e.collector != "nvml"
                and (e.state != "running" or "cannot" in e.message or "fail" in e.message)
            ):
                print(f"  collector {e.collector} {e.state}: {e.message[:200]}")
            elif name == "SampleWindow":
                wins.append(e)
        if wins:
            print(
                f"  {len(wins)} sample windows covering "
                f"{sum(w.t_end - w.t_start for w in wins):.1f} s: "
                + ", ".join(
                    f"{'wall' if w.idle else 'cpu'} {w.t_end - w.t_start:.1f} s "
                    f"{sum(c for _, _, c in w.counts)} samples/{w.ticks} ticks"
                    + (f" {w.errors} errors" if w.errors else "")
                    for w in wins
                )
            )
    except Exception as e:  # noqa: BLE001 - a diagnostic only
        print(f"  (could not read the recording's collector statuses: {type(e).__name__}: {e})")


# -- main -----------------------------------------------------------------------------------------
def start_server(args: argparse.Namespace) -> tuple[int, float]:
    t0 = time.time()
    cmd = [
        str(SERVE),
        "start",
        "--port",
        str(args.port),
        "--model",
        str(args.model),
        "--log",
        str(args.out / "server.log"),
        "--timeout",
        str(args.start_timeout),
    ]
    print(f"starting the server: {' '.join(cmd)}", flush=True)
    res = subprocess.run(cmd, check=False, stdout=subprocess.PIPE, text=True)
    m = re.search(r"ready pid=(\d+)", res.stdout)
    if res.returncode != 0 or not m:
        raise SystemExit(
            f"the server did not start (serve.sh exit {res.returncode}); "
            f"see {args.out / 'server.log'}"
        )
    return int(m.group(1)), time.time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--port", type=int, help="a running server's port (default: start one on 8765)")
    ap.add_argument(
        "--api-pid",
        type=int,
        help="the running server's API process (default: the process listening on --port)",
    )
    ap.add_argument(
        "--model",
        type=Path,
        default=DEFAULT_MODEL,
        help="model folder for a server this script starts (default .venv-vllm/tiny-llama)",
    )
    ap.add_argument("--clients", type=int, default=3, help="streaming client threads (default 3)")
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=24,
        help="tokens per request (default 24; ignore_eos, so every request makes them all)",
    )
    ap.add_argument(
        "--warmup", type=float, default=8, help="seconds of load before measuring (default 8)"
    )
    ap.add_argument(
        "--alone", type=float, default=20, help="seconds of the alone phase (default 20)"
    )
    ap.add_argument("--duration", type=float, default=20, help="record's --duration (default 20)")
    ap.add_argument(
        "--after",
        type=float,
        default=15,
        help="seconds alone again after record (default 15; 0 skips it)",
    )
    ap.add_argument("--nice", type=int, default=0, help="run infertop record under nice -n N")
    ap.add_argument(
        "--record-args", default="", metavar="ARGS",
        help="more flags for infertop record, as one string (e.g. '--no-inject'); default none",
    )
    ap.add_argument("--settle", type=float, default=3, help="seconds between phases (default 3)")
    ap.add_argument(
        "--record-grace",
        type=float,
        default=120,
        help="seconds past --duration before record is interrupted (default 120)",
    )
    ap.add_argument("--start-timeout", type=int, default=300, help="seconds to wait for the server")
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("/tmp/bench_vllm"),
        help="folder for the "
        "recording, report JSON, record's log, server log and summary (default /tmp/bench_vllm)",
    )
    ap.add_argument(
        "--stop-server", action="store_true", help="stop a server given with --port too"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    started = args.port is None
    startup_s = None
    api_pid = None
    bench = None
    try:
        if started:
            args.port = 8765
            api_pid, startup_s = start_server(args)
            print(f"server ready in {startup_s:.1f} s, API pid {api_pid}", flush=True)
        else:
            api_pid = args.api_pid or pid_listening_on(args.port)
            if api_pid is None:
                raise SystemExit(f"no process listens on port {args.port}; give --api-pid")
        conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=10)
        conn.request("GET", "/v1/models")
        model = json.loads(conn.getresponse().read())["data"][0]["id"]
        conn.close()
        bench = Bench(args, args.port, api_pid, model)
        procs = bench.server_procs()
        print("server processes:")
        for pid, role in procs.items():
            print(f"  {pid:>7} {role:<8} {cmdline(pid)[:100]}")

        bench.load.start()
        time.sleep(args.warmup)
        print(f"alone for {args.alone:g} s ...", flush=True)
        phases = [bench.measure("alone", args.alone)]
        time.sleep(args.settle)
        rec_path = args.out / "vllm.infertop"
        if rec_path.exists():
            rec_path.unlink()
        print(
            f"recorded: infertop record {api_pid} --children --duration {args.duration:g} ...",
            flush=True,
        )
        whole, parts, info = bench.recorded(rec_path, args.out / "record.log")
        phases.append(whole)
        if args.after > 0:
            time.sleep(args.settle)
            print(f"alone again for {args.after:g} s ...", flush=True)
            phases.append(bench.measure("after", args.after))
        bench.load.close()
        phases += parts

        print()
        print(table(phases))
        print()
        print(
            f"record: exit {info['rc']}, launch to exit {info['wall_s']:.1f} s, "
            "first progress line "
            f"after {fmt(info['first_progress_s'], '{:.2f}')} s, end line after "
            f"{fmt(info['end_line_s'], '{:.2f}')} s; infertop's CPU {info['cpu_s']:.1f} s "
            f"({info['cpu_cores']:.2f} cores), max RSS of a child {info['max_rss_mib']:.0f} MiB"
        )
        for line in info["stderr"]:
            if '"elapsed_s"' not in line:
                print(f"  record: {line[:300]}")
        if bench.load.errors:
            print(f"client errors: {len(bench.load.errors)}, first: {bench.load.errors[0][1]}")

        report = None
        if rec_path.exists():
            t0 = time.time()
            infertop = shutil.which("infertop", path=str(Path(sys.executable).parent)) or "infertop"
            res = subprocess.run(
                [infertop, "report", str(rec_path), "--format", "json"],
                check=False,
                capture_output=True,
                text=True,
            )
            report_s = time.time() - t0
            (args.out / "report.json").write_text(res.stdout)
            print(
                f"\ninfertop report: exit {res.returncode} in {report_s:.1f} s; "
                f"{rec_path.stat().st_size / 1024:.0f} KiB recording"
            )
            if res.stderr.strip():
                print("  report stderr: " + res.stderr.strip()[:2000])
            try:
                report = json.loads(res.stdout)
            except ValueError:
                print("  report output is not JSON")
            if report:
                for line in summarize_report(report):
                    print(line)
                print(engine_against_metrics(report.get("engine"), info["gauges"], whole))
                print(same_window(info["polls"], scheduler_span(rec_path)))
            collector_notes(rec_path)
        else:
            print(f"no recording at {rec_path}")

        summary = {
            "startup_s": startup_s,
            "api_pid": api_pid,
            "server_processes": {str(p): r for p, r in procs.items()},
            "phases": phases,
            "record": info,
            "args": {k: str(v) for k, v in vars(args).items()},
        }
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(
            f"\nsaved in {args.out}: vllm.infertop, report.json, record.log, summary.json"
            + (", server.log" if started else "")
        )
        return 0
    finally:
        if bench is not None:
            bench.load.stop.set()
        if api_pid is not None and (started or args.stop_server):
            killed = kill_tree(api_pid)
            print(
                f"server stopped (pid {api_pid} and its children)"
                + (f"; SIGKILLed {killed}" if killed else "")
            )


if __name__ == "__main__":
    sys.exit(main())
