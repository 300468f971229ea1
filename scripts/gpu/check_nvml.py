"""For a machine with an NVIDIA GPU: read NVML the way infertop does, print it, fail on gaps.

    python scripts/gpu/check_nvml.py [--pid PID] [--ticks 4] [--capture FIXTURE.json]

Exits 1 when NVML is unavailable or a metric every supported GPU should give is missing
(memory, utilisation, PCIe, clocks, power, temperature, throttle reasons; GPM on Hopper+),
when the collector reads slower than 2 Hz, or when the readings do not survive the recording
format and the report (gpu.memory, gpu.utilization) on their way to the GPU panel.
With --capture it writes the readings in the fixture format of tests/fixtures/nvml/ so the
tests can run on real readings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from infertop.collect.nvml import THROTTLE_REASONS, NvmlCollector, NvmlReader  # noqa: E402

REQUIRED = ("memory_used", "memory_total", "util_gpu", "util_memory", "pcie_tx_kbs",
            "sm_clock_mhz", "power_w", "temperature_c", "throttle")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pid", type=int, default=os.getpid())
    ap.add_argument("--ticks", type=int, default=4)
    ap.add_argument("--capture")
    args = ap.parse_args()
    reader = NvmlReader(args.pid)
    if not reader.available:
        print(f"FAIL: {reader.reason}")
        return 1
    readings = []
    for _ in range(args.ticks):
        readings.append(reader.read())
        time.sleep(0.5)
    failed = False
    for d in readings[-1].devices:
        print(json.dumps(asdict(d), indent=1))
        missing = [k for k in REQUIRED if getattr(d, k) is None]
        hopper = any(x in (d.name or "") for x in ("H100", "H200", "H800", "GH200", "B200", "B100"))
        if hopper:
            missing += [k for k in ("dram_bw_util", "sm_util", "tensor_util") if getattr(d, k) is None]
        if missing:
            failed = True
            print(f"FAIL device {d.index}: missing {missing}")
    print("unavailable:", reader.unavailable)
    if args.capture:
        devices = []
        for i, d in enumerate(readings[0].devices):
            devices.append({
                "name": d.name, "uuid": d.uuid, "memory_total": d.memory_total,
                "gpm_supported": d.dram_bw_util is not None or any(r.devices[i].dram_bw_util is not None for r in readings),
                "ticks": [{
                    "memory_used": r.devices[i].memory_used, "util_gpu": r.devices[i].util_gpu,
                    "util_memory": r.devices[i].util_memory, "pcie_tx": r.devices[i].pcie_tx_kbs,
                    "pcie_rx": r.devices[i].pcie_rx_kbs, "nvlink_tx": r.devices[i].nvlink_tx_kbs,
                    "nvlink_rx": r.devices[i].nvlink_rx_kbs, "sm_clock": r.devices[i].sm_clock_mhz,
                    "mem_clock": r.devices[i].mem_clock_mhz,
                    "power": None if r.devices[i].power_w is None else int(r.devices[i].power_w * 1000),
                    "temperature": r.devices[i].temperature_c,
                    "throttle": sum(bit for bit, n in THROTTLE_REASONS if n in (r.devices[i].throttle or ())),
                    "processes": [list(p) for p in r.devices[i].processes],
                    "gpm": {"dram_bw_util": r.devices[i].dram_bw_util or 0.0, "sm_util": r.devices[i].sm_util or 0.0,
                            "tensor_util": r.devices[i].tensor_util or 0.0},
                } for r in readings],
            })  # fmt: skip
        Path(args.capture).write_text(json.dumps({"provenance": "captured by scripts/gpu/check_nvml.py", "devices": devices}, indent=1))
        print(f"wrote {args.capture}")
    reader.close()
    return 1 if failed or not pipeline(args.pid) else 0


def pipeline(pid: int) -> bool:
    """The collector at its default rate for 3 s, then recording -> replay -> report."""
    import tempfile

    from infertop.analysis.snapshot import build_snapshot
    from infertop.config import Config
    from infertop.model.events import TargetInfo
    from infertop.model.gpu import GpuReading
    from infertop.record.reader import read_recording
    from infertop.record.writer import RecordingWriter
    from infertop.report.build import build_report
    from infertop.sources import ReplaySource

    col = NvmlCollector(pid)
    t0 = time.perf_counter()
    col._reader.read()
    cost = time.perf_counter() - t0
    col.start()
    time.sleep(3.0)
    col.stop()
    events = col.poll()
    readings = [e for e in events if isinstance(e, GpuReading)]
    print(f"collector: {len(readings)} readings in 3 s, one read of every GPU takes {cost * 1000:.1f} ms")
    ok = len(readings) >= 6
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gpu.infertop")
        w = RecordingWriter(path)
        w.write([TargetInfo(pid, started=readings[0].t if readings else 0.0), *events])
        w.close()
        rec = read_recording(path)
        back = [e for e in rec.events if isinstance(e, GpuReading)]
        ok = ok and back == readings and rec.warning is None
        src = ReplaySource(rec, Config())
        rep = build_report(build_snapshot(src.session, t=src.t), "recording", path)
    g = rep["gpu"]
    print("report gpu.memory:", json.dumps(g["memory"]))
    print("report gpu.utilization:", json.dumps(g["utilization"], indent=1))
    ok = ok and g["available"] and g["memory"] and g["memory"]["total"] and g["utilization"]
    if not ok:
        print("FAIL: the readings did not make it through collector -> recording -> report")
    return bool(ok)


if __name__ == "__main__":
    sys.exit(main())
