"""Recording event 13 (format 1.2): one NVML reading of every GPU (docs/recording-format.md).

    [13, t, [device, ...]]
    device = [index, name, uuid, memory_used, memory_total, process_memory, util_gpu,
              util_memory, pcie_tx_kbs, pcie_rx_kbs, nvlink_tx_kbs, nvlink_rx_kbs,
              sm_clock_mhz, mem_clock_mhz, power_w, temperature_c, throttle, dram_bw_util,
              sm_util, tensor_util, processes]

Every field but ``index`` may be nil (NVML could not give it). ``throttle`` is a list of reason
names, ``processes`` a flat list ``[pid, bytes, pid, bytes, ...]``. A reader ignores trailing
fields it does not know, so later versions may append metrics.
"""

from __future__ import annotations

from typing import Any

from infertop.model.gpu import GpuDeviceReading, GpuReading
from infertop.model.numbers import bounded_float, bounded_int

GPU = 13

#: (field, kind) in wire order after ``index``; kind: "int" bytes, "num" a measurement, "str"
FIELDS: tuple[tuple[str, str], ...] = (
    ("name", "str"),
    ("uuid", "str"),
    ("memory_used", "int"),
    ("memory_total", "int"),
    ("process_memory", "int"),
    ("util_gpu", "num"),
    ("util_memory", "num"),
    ("pcie_tx_kbs", "num"),
    ("pcie_rx_kbs", "num"),
    ("nvlink_tx_kbs", "num"),
    ("nvlink_rx_kbs", "num"),
    ("sm_clock_mhz", "num"),
    ("mem_clock_mhz", "num"),
    ("power_w", "num"),
    ("temperature_c", "num"),
    ("throttle", "names"),
    ("dram_bw_util", "num"),
    ("sm_util", "num"),
    ("tensor_util", "num"),
    ("processes", "pairs"),
)


def _num(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"expected a number, got {type(x).__name__}")
    return bounded_float(float(x))


def _int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(f"expected an integer, got {type(x).__name__}")
    return bounded_int(x)


def _field(kind: str, x: Any) -> Any:
    if kind == "pairs":
        if not isinstance(x, list) or len(x) % 2:
            raise ValueError("processes is not a flat [pid, bytes, ...] list")
        return tuple((_int(x[i]), _int(x[i + 1])) for i in range(0, len(x), 2))
    if x is None:
        return None
    if kind == "str":
        if not isinstance(x, str):
            raise ValueError("expected a string")
        return x
    if kind == "int":
        return _int(x)
    if kind == "num":
        return _num(x)
    if not isinstance(x, list) or not all(isinstance(n, str) for n in x):
        raise ValueError("throttle is not a list of names")
    return tuple(x)


def _wire(kind: str, value: Any) -> Any:
    if kind == "pairs":
        return [v for pair in value for v in pair]
    if kind == "names":
        return None if value is None else list(value)
    return value


def encode_gpu_reading(r: GpuReading) -> list[Any]:
    return [
        GPU,
        r.t,
        [[d.index, *(_wire(kind, getattr(d, name)) for name, kind in FIELDS)] for d in r.devices],
    ]


def decode_gpu_reading(f: list[Any]) -> GpuReading:
    """A reading from its fields (after the code); any malformation raises ValueError."""
    try:
        t, rows = _num(f[0]), f[1]
        if not isinstance(rows, list):
            raise ValueError("devices is not a list")
        devices = []
        for row in rows:
            if not isinstance(row, list) or len(row) < 1 + len(FIELDS):
                raise ValueError("a device row is short")
            values = {name: _field(kind, row[i + 1]) for i, (name, kind) in enumerate(FIELDS)}
            devices.append(GpuDeviceReading(index=_int(row[0]), **values))
        return GpuReading(t, tuple(devices))
    except (TypeError, IndexError, KeyError, AttributeError) as exc:
        raise ValueError(f"malformed GPU reading: {exc}") from None
