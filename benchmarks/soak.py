"""Soak: one target, one long attached session; the target's and infertop's resources over time.

    python benchmarks/soak.py [--minutes 30] [--every 30] [--mode ui|record] [--sample NAME]

Starts the sample (``samples/``), attaches infertop to it (``ui``: ``infertop attach`` in a tmux
terminal of 120x40; ``record``: ``infertop record`` headless), and every ``--every`` seconds prints
the target's RSS, threads and fds and infertop's RSS, threads, fds and CPU. At the end (``ui``)
it checks that the UI still answers: a key that switches the view, timed until the screen shows
it; then ``q``, and the target's threads and fds after the detach against those before the
attach. Not a test: numbers for docs/performance.md ("Soak").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def start_sample(name: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [PY, "-m", f"samples.{name}"], cwd=ROOT, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    pyspy = str(Path(PY).parent / "py-spy")
    for _ in range(150):
        if proc.poll() is not None:
            raise SystemExit(f"the sample exited: {proc.stderr.read().decode()[-500:]}")
        r = subprocess.run([pyspy, "dump", "--pid", str(proc.pid)], capture_output=True, text=True)
        if r.returncode == 0 and "Thread" in r.stdout:
            time.sleep(3)  # let it reach its steady state (threads started, model built)
            return proc
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the sample never became readable")


def usage(pid: int) -> dict[str, float]:
    p = psutil.Process(pid)
    with p.oneshot():
        cpu = p.cpu_times()
        return {
            "rss_mb": p.memory_info().rss / 2**20,
            "threads": p.num_threads(),
            "fds": p.num_fds(),
            "cpu_s": cpu.user + cpu.system,
        }


class Terminal:
    def __init__(self, command: str) -> None:
        self.name = f"infertop-soak-{uuid.uuid4().hex[:8]}"
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", self.name, "-x", "120", "-y", "40",
             f"cd {ROOT} && exec {command}"],
            check=True,
        )  # fmt: skip
        out = subprocess.run(["tmux", "list-panes", "-t", self.name, "-F", "#{pane_pid}"],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        self.pid = int(out.split()[0])

    def screen(self) -> str:
        cmd = ["tmux", "capture-pane", "-p", "-t", self.name]
        return subprocess.run(cmd, capture_output=True, text=True).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def until(self, text: str, timeout: float = 10.0) -> float:
        """Seconds until ``text`` is on the screen (inf if never)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if text in self.screen():
                return time.monotonic() - t0
            time.sleep(0.01)
        return float("inf")

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--every", type=float, default=30.0, help="seconds between readings")
    ap.add_argument("--mode", choices=("ui", "record"), default="ui")
    ap.add_argument("--sample", default="textgen_service")
    args = ap.parse_args()
    if args.mode == "ui" and shutil.which("tmux") is None:
        raise SystemExit("--mode ui needs tmux; use --mode record")
    target = start_sample(args.sample)
    before = usage(target.pid)
    out = f"/tmp/infertop-soak-{os.getpid()}.infertop"
    cmd = f"{PY} -m infertop attach {target.pid} --record {out}"
    if args.mode == "record":
        cmd = f"{PY} -m infertop record {target.pid} -o {out} --duration {args.minutes * 60:g}"
    term = Terminal(cmd) if args.mode == "ui" else None
    if term is not None:
        ours = term.pid
    else:
        ours = subprocess.Popen(cmd.split(), cwd=ROOT, stderr=subprocess.DEVNULL).pid
    print(f"target {target.pid} ({args.sample}), infertop {ours} ({args.mode}), "
          f"{args.minutes:g} min")  # fmt: skip
    print(f"{'t_s':>6} | {'target rss MB':>13} {'thr':>4} {'fds':>4} | "
          f"{'infertop rss MB':>15} {'thr':>4} {'fds':>4} {'cpu %':>6} | recording MB")  # fmt: skip
    t0 = time.monotonic()
    last_cpu, last_t = usage(ours)["cpu_s"], t0
    rows: dict[str, list[float]] = {}
    try:
        while True:
            now = time.monotonic()
            t, i = usage(target.pid), usage(ours)
            cpu = 100 * (i["cpu_s"] - last_cpu) / max(now - last_t, 1e-6)
            last_cpu, last_t = i["cpu_s"], now
            size = os.path.getsize(out) / 2**20 if os.path.exists(out) else 0.0
            for key, value in (("target RSS MB", t["rss_mb"]), ("target threads", t["threads"]),
                               ("target fds", t["fds"]), ("infertop RSS MB", i["rss_mb"]),
                               ("infertop threads", i["threads"]), ("infertop fds", i["fds"]),
                               ("infertop CPU %", cpu), ("recording MB", size)):  # fmt: skip
                rows.setdefault(key, []).append(value)
            print(f"{now - t0:6.0f} | {t['rss_mb']:13.1f} {t['threads']:4.0f} {t['fds']:4.0f} | "
                  f"{i['rss_mb']:15.1f} {i['threads']:4.0f} {i['fds']:4.0f} {cpu:6.1f} | "
                  f"{size:.1f}", flush=True)  # fmt: skip
            if now - t0 >= args.minutes * 60:
                break
            time.sleep(min(args.every, max(0.0, args.minutes * 60 - (now - t0))))
        print(f"{'':16s} {'first':>8} {'last':>8} {'min':>8} {'max':>8}   (first: the first reading)")
        for key, xs in rows.items():
            print(f"{key:16s} {xs[0]:8.1f} {xs[-1]:8.1f} {min(xs):8.1f} {max(xs):8.1f}")
        if term is not None:
            # responsive at the end: the ops view's title, then back to the flame
            term.keys("o")
            a = term.until("torch ops · session")
            term.keys("o", "o")
            b = term.until("flame · session")
            print(f"UI after {args.minutes:g} min: key 'o' drawn in {a * 1000:.0f} ms, "
                  f"'o o' back to the flame in {b * 1000:.0f} ms (screen polled every 10 ms)")
            term.keys("q")
            gone = psutil.wait_procs([psutil.Process(ours)], timeout=20)[0]
            print("infertop quit" if gone else "infertop did NOT quit within 20 s")
        else:
            psutil.Process(ours).wait(timeout=args.minutes * 60 + 60)
        time.sleep(3)  # the agent detaches within a second or two
        after = usage(target.pid)
        print(f"target before attach: {before['threads']:.0f} threads, {before['fds']:.0f} fds, "
              f"{before['rss_mb']:.1f} MB; after detach: {after['threads']:.0f} threads, "
              f"{after['fds']:.0f} fds, {after['rss_mb']:.1f} MB")  # fmt: skip
    finally:
        if term is not None:
            term.close()
        target.terminate()
        try:
            _, err = target.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            target.kill()
            _, err = target.communicate()
        if err:
            print(f"target stderr: {err.decode(errors='replace')[-500:]}")
        if os.path.exists(out):
            os.unlink(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
