"""Starting real target processes and running the real CLI against them."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
INFERTOP = [sys.executable, "-m", "infertop"]
#: Python 3.12 with the ASGI stacks and LitServe (``make .venv312/.installed``)
VENV312 = ROOT / ".venv312" / "bin" / "python"


def status_of(path: Path) -> dict:
    """A target's JSON status file as last written, or {} before its first write."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def start_target(args: list[str], python: str | None = None, **kw) -> subprocess.Popen[str]:
    """Start a Python target (with ``python``, else this test's interpreter) and wait until
    py-spy can read it (its interpreter is up)."""
    proc = subprocess.Popen(
        [python or sys.executable, *args],
        cwd=ROOT,
        stdin=kw.pop("stdin", subprocess.DEVNULL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"target exited early: {proc.stderr.read() if proc.stderr else ''}")
        r = subprocess.run(
            [str(Path(sys.executable).parent / "py-spy"), "dump", "--pid", str(proc.pid)],
            capture_output=True, text=True,
        )  # fmt: skip
        if r.returncode == 0 and "Thread" in r.stdout:
            return proc
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("target never became readable by py-spy")


def stop_target(proc: subprocess.Popen[str]) -> tuple[str, str]:
    if proc.poll() is None:
        proc.terminate()
    try:
        out, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return out, err


def infertop(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        INFERTOP + list(args), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def report_json(path: str, *extra: str) -> dict:
    p = infertop("report", path, "--format", "json", *extra)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def shares(rep: dict) -> dict[str, float]:
    return {s["name"]: s["share"] for s in rep["stages"]}


def read_truth(path: str, timeout: float = 60.0) -> dict:
    """The target's truth file, once it has written one: a sample builds its tokenizer and model
    first, which took longer than 5 s on a busy machine."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise AssertionError(f"no ground truth in {path} after {timeout:g} s") from None
            time.sleep(0.1)


def env_without_agent() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("INFERTOP_AGENT", None)
    return env


def serving(cmd: list[str], timeout: float = 90) -> subprocess.Popen[str]:
    """Start a sample (``cmd``: its script and arguments) and wait for its first throughput
    line: its model is up and it serves. Its stdout stays readable (the rest of it)."""
    proc = subprocess.Popen(
        [sys.executable, *cmd], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    proc.banner = []  # type: ignore[attr-defined]  # the lines it wrote before serving
    deadline = time.time() + timeout
    while time.time() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("throughput:"):
                return proc
            proc.banner.append(line)  # type: ignore[attr-defined]
            if not line and proc.poll() is not None:
                break
    proc.kill()
    raise AssertionError(f"{cmd} never served")


def workers_of(pid: int) -> list[int]:
    """The worker processes of ``samples/multiproc_service.py`` started as ``pid``."""
    from infertop.collect.tree import descendants, read_cmdline

    return [p for p in descendants(pid) if "spawn_main" in read_cmdline(p)]


def workers_in_order(sample: subprocess.Popen[str]) -> list[int]:
    """The pids of a ``multiproc_service.py`` sample's workers, worker 1 first, as the sample
    said when they were ready (not by pid: the pid counter may wrap between two workers)."""
    found = (re.match(r"worker (\d+) \(pid (\d+)\) ready", line) for line in sample.banner)
    return [int(m[2]) for m in sorted((m for m in found if m), key=lambda m: int(m[1]))]


def cpu_seconds(pid: int) -> tuple[float, float]:
    """Seconds ``pid``'s threads have run on a CPU and spent runnable but waiting for one (the
    kernel's schedstat: its first two fields, in ns), summed over its threads."""
    run = wait = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                fields = fh.read().split()
            run, wait = run + int(fields[0]), wait + int(fields[1])
        except (OSError, IndexError, ValueError):
            pass
    return run / 1e9, wait / 1e9


def until(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll ``predicate`` until it is truthy (returns its value) or fail after ``timeout`` s
    saying ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(interval)


def pid_gone(pid: int | str) -> bool:
    """No process ``pid`` (a zombie child counts as gone: it runs nothing)."""
    try:
        return psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
