"""GPU check of the in-process agent (a standalone script: pytest does not collect it).

Run it on a machine with an NVIDIA GPU and a CUDA build of torch, from the repository root::

    python scripts/gpu/check_agent.py [--seconds 12] [--json out.json]

It starts a CUDA workload (a small MLP fed by pageable *and* pinned host->device copies, with
device->host copies, a device->device clone, a memset and a .item() sync each step), injects the
agent into it, profiles for a while, detaches, and checks that what a GPU target must show
arrived: kernels (compute), memcpy of each kind with the right host-memory kind, device syncs,
GPU busy time, kernels under the op that launched them, allocator readings; and that detach left
the target clean (socket gone, nothing on its stderr). Prints a summary; exits 1 on a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from infertop.agent import protocol as P  # noqa: E402
from infertop.agent.inject import inject  # noqa: E402

WORKLOAD = r'''
import os, signal, sys, time, json
import torch
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
dev = torch.device("cuda")
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
).to(dev).eval()
pinned = torch.empty(64, 1024).pin_memory()
scratch = torch.empty(1 << 20, device=dev)
n = 0
status = sys.argv[1]
with torch.inference_mode():
    while not stop:
        x = torch.randn(64, 1024)                       # pageable host memory
        with torch.profiler.record_function("infertop:preprocess"):
            xd = x.to(dev)                              # Memcpy HtoD (Pageable -> Device)
            pinned.copy_(x)
            xp = pinned.to(dev, non_blocking=True)      # Memcpy HtoD (Pinned -> Device)
        y = model(xd + xp)
        z = y.clone()                                   # a copy on the device
        scratch.zero_()                                 # Memset / fill kernel
        out = z.cpu()                                   # Memcpy DtoH (Device -> Pageable), sync
        s = float(y.sum().item())                       # aten::item: a device sync
        n += 1
        if n % 20 == 0:
            with open(status + ".tmp", "w") as fh:
                json.dump({"n": n, "t": time.time()}, fh)
            os.replace(status + ".tmp", status)
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--json", help="write the summary here too")
    args = ap.parse_args()

    import torch  # noqa: F401  (only to fail early with a clear message)

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 1

    tmp = Path(tempfile.mkdtemp(prefix="infertop-gpu-"))
    script = tmp / "workload.py"
    script.write_text(WORKLOAD)
    status = tmp / "status.json"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(status)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    failures: list[str] = []
    summary: dict = {}

    def check(cond: bool, what: str) -> None:
        (summary.setdefault("checks", {}))[what] = bool(cond)
        if not cond:
            failures.append(what)

    try:
        deadline = time.time() + 120
        while not status.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        if not status.exists():
            print("workload did not start:", proc.communicate(timeout=30))
            return 1
        t0 = time.monotonic()
        result = inject(proc.pid, timeout=10)
        summary["inject"] = {
            "ok": result.ok, "method": result.method, "reason": result.reason,
            "freeze_s": result.freeze_s, "elapsed_s": round(time.monotonic() - t0, 3),
        }  # fmt: skip
        if not result.ok:
            print(json.dumps(summary, indent=2))
            return 1
        sock = P.connect(result.socket_path, timeout=30)
        P.send_msg(sock, {"cmd": "hello", "client": "gpu-check"})
        hello = P.recv_msg(sock)
        summary["hello"] = hello
        check(hello.get("cuda") is True, "hello says cuda")
        P.send_msg(sock, {"cmd": "configure", "window_s": 0.5, "period_s": 2.0, "record_shapes": True})
        P.recv_msg(sock)
        P.send_msg(sock, {"cmd": "start"})
        windows, allocator, statuses = [], [], []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            try:
                msg = P.recv_msg(sock)
            except P.MessageTimeout:
                continue
            kind = msg.get("type")
            if kind == "window":
                windows.append(msg)
            elif kind == "allocator":
                allocator.append(msg)
            elif kind == "status":
                statuses.append(msg)
        P.send_msg(sock, {"cmd": "detach"})
        try:
            while P.recv_msg(sock).get("type") != "ok":
                pass
        except P.ProtocolError:
            pass
        sock.close()

        kernels = [k for w in windows for k in w["kernels"]]
        memcpy = {(m[0], m[1]) for w in windows for m in w["memcpy"]}
        syncs = {s[0] for w in windows for s in w["syncs"]}
        cuda_leaves = [p for w in windows for p in w["paths"] if p[2] == "cuda"]
        summary["windows"] = [
            {"events": w["events"], "truncated": w["truncated"], "len_s": round(w["t_end"] - w["t_start"], 3),
             "kernels": len(w["kernels"]), "memcpy": w["memcpy"], "syncs": w["syncs"], "gpu": w["gpu"]}
            for w in windows
        ]  # fmt: skip
        summary["statuses"] = statuses
        summary["allocator_samples"] = allocator[:3]
        summary["top_cuda_paths"] = sorted(cuda_leaves, key=lambda p: -p[4])[:8]
        check(len(windows) >= 2, "two or more windows")
        check(any(k[1] == "compute" for k in kernels), "compute kernels")
        check(("HtoD", "pageable") in memcpy, "HtoD pageable copies")
        check(("HtoD", "pinned") in memcpy, "HtoD pinned copies")
        check(any(k == "DtoH" for k, _ in memcpy), "DtoH copies")
        check(bool(syncs), "device syncs")
        check(any(w["gpu"] and w["gpu"]["busy_us"] > 0 for w in windows), "gpu busy time")
        check(any(len(p[0]) >= 2 and p[0][0].startswith("aten::") for p in cuda_leaves), "kernels under their op")
        check(any(p[1] == "preprocess" and p[0][-1].startswith("Memcpy HtoD") for p in cuda_leaves),
              "copies in the annotated preprocess stage")  # fmt: skip
        check(any(p[1] == "sync" for w in windows for p in w["paths"]), "sync-stage ops")
        check(bool(allocator) and allocator[-1]["reserved"] > 0, "allocator readings")
        time.sleep(1.5)
        check(not os.path.exists(result.socket_path), "socket removed after detach")
        check(proc.poll() is None, "workload still running")
    finally:
        if proc.poll() is None:
            proc.terminate()
        out, err = proc.communicate(timeout=60)
        summary["target_stdout"], summary["target_stderr"] = out[-2000:], err[-2000:]
    check(err == "", "target stderr clean")
    summary["failures"] = failures
    text = json.dumps(summary, indent=2, default=str)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    print("FAILED: " + ", ".join(failures) if failures else "OK: all GPU agent checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
