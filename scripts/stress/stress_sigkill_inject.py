"""SIGKILL of the injector while it holds the target's main thread: does the target survive?
(not collected)

    python scripts/stress/stress_sigkill_inject.py [--attempts 40] [--seed 1]

A target without torch (tests/agent/targets/spans_target.py) runs; again and again, a separate
process calls ``inject(pid, require_torch=False)`` (the built-in ptrace caller) and is killed
with SIGKILL a random 0-4 ms after it has seized the target (``TracerPid`` set). An injection
that went through is detached. Prints each crash of the target and a summary; exit status 1
when the target died at least once.

Why it matters: ``inject.tracee.Tracee.call`` points the stopped thread at a function with a return
address of 0 and lets it run; only the injector puts the registers back. An injector killed
during a call would leave the kernel to detach the thread as it is: the function returns to
address 0 and the target dies of SIGSEGV. So the ptrace session runs in a helper process of its
own session (``inject.ptrace.via_ptrace``), which a kill of the caller does not interrupt.

Measured on the 2-core dev machine (Python 3.11 target, seed 1): before the helper process, 6
target crashes (SIGSEGV) in 40 attempts; with it, 0 in 40 (all 40 killed the caller while the
target was traced). Kills that came before the pending call was placed used to leave a boot
file in /tmp/infertop-<uid>/; this script removes its targets' ones.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "tests" / "agent" / "targets" / "spans_target.py"
INJECT = (
    "import sys; sys.path.insert(0, %r)\n"
    "from infertop.agent.inject import inject\n"
    "print(inject(%d, timeout=3, require_torch=False).kind)\n"
)


def start_target(status_dir: str) -> subprocess.Popen:
    status = os.path.join(status_dir, "status-%d.json" % time.monotonic_ns())
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERTOP_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, str(TARGET), "--status", status],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    while not os.path.exists(status):
        if proc.poll() is not None:
            raise SystemExit("the target did not start")
        time.sleep(0.02)
    return proc


def tracer_of(pid: int) -> int:
    try:
        with open("/proc/%d/status" % pid) as fh:
            for line in fh:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except OSError:
        return -1
    return 0


def remove_boot_files(pid: int) -> None:
    sys.path.insert(0, str(ROOT))
    from infertop.agent import protocol

    folder = protocol.socket_dir(os.geteuid())
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        if name.startswith("boot-%d-" % pid):
            os.unlink(os.path.join(folder, name))


def detach_agent(pid: int) -> None:
    sys.path.insert(0, str(ROOT))
    from infertop.agent import protocol
    from infertop.collect.agent.attach import _detach

    sock = protocol.socket_path(pid, os.geteuid())
    if os.path.exists(sock):
        _detach(sock)
        deadline = time.monotonic() + 3
        while os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attempts", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    status_dir = "/tmp/infertop-stress-%d" % os.getpid()
    os.makedirs(status_dir, exist_ok=True)
    target = start_target(status_dir)
    crashes = traced = 0
    try:
        for attempt in range(args.attempts):
            injector = subprocess.Popen(
                [sys.executable, "-c", INJECT % (str(ROOT), target.pid)], stdout=subprocess.DEVNULL
            )
            deadline = time.monotonic() + 10
            while tracer_of(target.pid) == 0 and injector.poll() is None and time.monotonic() < deadline:
                pass  # spin: the main thread is held for ~2 ms
            traced += tracer_of(target.pid) > 0
            time.sleep(rng.uniform(0, 0.004))
            injector.send_signal(signal.SIGKILL)
            injector.wait()
            time.sleep(0.3)
            if target.poll() is not None:
                remove_boot_files(target.pid)
                crashes += 1
                print("attempt %d: the target died (exit status %s)" % (attempt, target.returncode), flush=True)
                target = start_target(status_dir)
            else:
                detach_agent(target.pid)
    finally:
        target.kill()
        target.wait()
        remove_boot_files(target.pid)
        shutil.rmtree(status_dir, ignore_errors=True)
    print("%d attempts, %d killed while tracing, %d target crashes" % (args.attempts, traced, crashes))
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
