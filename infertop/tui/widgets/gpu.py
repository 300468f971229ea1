"""The GPU panel: device memory (this process / others / free) beside the allocator's numbers,
and utilisation and bandwidth over time in the stage panel's own columns, so a stall sits
under the stage it happened in. Without NVML or a GPU it is one plain line saying why."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from infertop.analysis.gpu_series import (
    GpuSeries,
    GpuView,
    allocator_device,
    nvml_reason,
    target_devices,
)
from infertop.analysis.snapshot import Snapshot
from infertop.model.gpu import GpuDeviceReading
from infertop.tui.palette import bar, human_bytes
from infertop.tui.widgets.stages import NAME_W, PCT_W, TOTAL_W, stage_columns

_SPARK = "▁▂▃▄▅▆▇█"
THIS_COLOR, OTHERS_COLOR, FREE_STYLE = "#87d75f", "#d7af5f", "on #303030"
STALL_STYLE = "bold #ff6f6f"

#: (series key, row label, unit): "%" rows are 0..100; "bw" rows are KB/s, drawn against their max
ROWS = (
    ("util_gpu", "SM busy", "%"),
    ("util_memory", "mem busy", "%"),
    ("dram_bw_util", "DRAM bw", "%"),
    ("pcie_kbs", "PCIe", "bw"),
    ("nvlink_kbs", "NVLink", "bw"),
)


def gpu_sparkline(values: tuple[float | None, ...], scale: float, width: int) -> Text:
    """The last ``width`` buckets: no reading blank, 0 a red dot (the GPU stalled), else a block."""
    out = Text(no_wrap=True)
    tail = values[-width:] if width > 0 else ()
    out.append(" " * (width - len(tail)))
    for v in tail:
        if v is None:
            out.append(" ")
        elif v <= 0:
            out.append("·", style=STALL_STYLE)
        else:
            out.append(_SPARK[min(len(_SPARK) - 1, int(min(v / scale, 1.0) * len(_SPARK)))])
    return out


def _bw(kbs: float | None) -> str:
    return "-" if kbs is None else f"{kbs / 1e6:.1f}G/s" if kbs >= 1e5 else f"{kbs / 1e3:.0f}M/s"


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}%" if unit == "%" else _bw(v)


def device_title(d: GpuDeviceReading, position: int, count: int) -> str:
    facts = [f"GPU {d.index}", d.name or "?"]
    if d.temperature_c is not None:
        facts.append(f"{d.temperature_c:.0f}°C")
    if d.power_w is not None:
        facts.append(f"{d.power_w:.0f} W")
    if d.sm_clock_mhz is not None:
        facts.append(f"SM {d.sm_clock_mhz:.0f} MHz")
    throttled = [t for t in d.throttle or () if t != "gpu_idle"]
    if throttled:
        facts.append("throttled: " + ",".join(throttled))
    if count > 1:
        facts.append(f"{position + 1}/{count} (g: next GPU)")
    return " · ".join(facts)


def memory_row(snap: Snapshot, view: GpuView, d: GpuDeviceReading, bar_w: int, label: str = "memory") -> Text:
    """memory  [this|others|free]  this process 54.7 GB · others 2.0 GB · free … of …"""
    row = Text(no_wrap=True, overflow="ellipsis")
    row.append(label.ljust(NAME_W), style="bold")
    total, used, mine = d.memory_total, d.memory_used, d.process_memory
    if not total or used is None:
        return row.append("not available", style="dim")
    others = max(0, used - mine) if mine is not None else used
    this_w = round(bar_w * (mine or 0) / total)
    others_w = min(bar_w - this_w, round(bar_w * others / total))
    row.append("█" * this_w, style=THIS_COLOR)
    row.append("█" * others_w, style=OTHERS_COLOR)
    row.append(" " * (bar_w - this_w - others_w), style=FREE_STYLE)
    row.append(f"{100 * used / total:.0f}%".rjust(PCT_W), style="bold")
    row.append("  ")
    if mine is not None:
        row.append(f"this process {human_bytes(mine)}", style=THIS_COLOR)
        row.append(" · ")
        row.append(f"others {human_bytes(others)}", style=OTHERS_COLOR)
    else:
        row.append(f"used {human_bytes(used)} (whose: no permission)", style=OTHERS_COLOR)
    row.append(f" · free {human_bytes(max(0, total - used))} of {human_bytes(total)}")
    return row


def allocator_row(snap: Snapshot, view: GpuView, d: GpuDeviceReading, bar_w: int) -> Text | None:
    """torch  [allocated|reserved on the same scale as the memory bar]  allocated … reserved …;
    None when the allocator's device is not this one (or there is no agent)."""
    a = snap.torch.allocator
    latest = view.readings[-1:] if view.readings else ()
    if a is None or not d.memory_total or allocator_device(a, view.devices, target_devices(latest)) is not d:
        return None
    total = d.memory_total
    alloc_w = round(bar_w * a.allocated / total)
    slack_w = max(0, min(bar_w - alloc_w, round(bar_w * a.reserved / total) - alloc_w))
    row = Text(no_wrap=True, overflow="ellipsis")
    row.append("torch".ljust(NAME_W), style="bold")
    row.append("█" * alloc_w, style=THIS_COLOR)
    row.append("▒" * slack_w, style=THIS_COLOR)
    row.append(" " * (bar_w - alloc_w - slack_w), style=FREE_STYLE)
    row.append(f"{100 * a.reserved / total:.0f}%".rjust(PCT_W), style="bold")
    row.append(f"  allocated {human_bytes(a.allocated)} · reserved {human_bytes(a.reserved)}")
    row.append(f" · cached, unused {human_bytes(max(0, a.reserved - a.allocated))}", style="dim")
    if a.alloc_retries or a.ooms:
        row.append(f" · {a.alloc_retries} retries, {a.ooms} OOMs", style=STALL_STYLE)
    return row


def metric_rows(view: GpuView, position: int, bar_w: int, spark_w: int) -> list[Text]:
    d, series, means = view.devices[position], view.series[position], view.session_means[position]
    rows: list[Text] = []
    for key, label, unit in ROWS:
        values = series.values[key]
        now = _now_value(d, key)
        if now is None and all(v is None for v in values):
            continue  # this GPU does not give it (no GPM, no NVLink): no empty row
        scale = 100.0 if unit == "%" else max([v for v in values if v] + [now or 0, 1.0])
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append(label.ljust(NAME_W), style="bold")
        filled, empty = bar((now or 0.0) / scale, bar_w)
        row.append(filled, style="#5fafff")
        row.append(empty, style=FREE_STYLE)
        row.append(_value(now, unit).rjust(PCT_W), style="bold")
        row.append(_value(means.get(key), unit).rjust(TOTAL_W), style="dim")
        if spark_w:
            row.append("  ")
            row.append_text(gpu_sparkline(values, scale, spark_w))
        if key == "pcie_kbs" and d.pcie_rx_kbs is not None and d.pcie_tx_kbs is not None:
            row.append(f"  rx {_bw(d.pcie_rx_kbs)} tx {_bw(d.pcie_tx_kbs)}", style="dim")
        if key == "util_gpu" and d.tensor_util is not None:
            row.append(f"  tensor {d.tensor_util:.0f}%  SM active {d.sm_util or 0:.0f}%", style="dim")
        rows.append(row)
    return rows


def _now_value(d: GpuDeviceReading, key: str) -> float | None:
    if key == "pcie_kbs":
        parts = [x for x in (d.pcie_tx_kbs, d.pcie_rx_kbs) if x is not None]
        return sum(parts) if parts else None
    if key == "nvlink_kbs":
        parts = [x for x in (d.nvlink_tx_kbs, d.nvlink_rx_kbs) if x is not None]
        return sum(parts) if parts else None
    value = getattr(d, key)
    return None if value is None else float(value)


def render_gpu(snap: Snapshot | None, width: int, selected: int | None, compact: bool = False) -> Text:
    """The panel's text: a one-line reason without readings, else memory and metric rows."""
    if snap is None:
        return Text("GPU: waiting…", style="dim italic")
    view = snap.nvml
    if view is None or not view.devices:
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append("GPU  ", style="bold")
        line.append(nvml_reason(snap.statuses), style="dim")
        return line
    position = selected_position(view, selected)
    bar_w, spark_w, _lat = stage_columns(snap, width)
    d = view.devices[position]
    lines = [Text(device_title(d, position, len(view.devices)), style="bold #bcbcbc on #262626",
                  no_wrap=True, overflow="ellipsis")]  # fmt: skip
    memory = memory_row(snap, view, d, bar_w, f"GPU {d.index} mem" if compact else "memory")
    metrics = metric_rows(view, position, bar_w, spark_w)
    if compact:  # short terminals: the memory bar (naming its GPU) and SM busy
        return Text("\n").join([memory, *metrics[:1]])
    lines.append(memory)
    torch = allocator_row(snap, view, d, bar_w)
    if torch is not None:
        lines.append(torch)
    lines += metrics
    return Text("\n").join(lines)


def selected_position(view: GpuView, selected: int | None) -> int:
    """Where the selected GPU index is in the view's order (the target's first by default)."""
    for i, d in enumerate(view.devices):
        if d.index == selected:
            return i
    return 0


class GpuPanel(Widget):
    """NVML readings of one GPU at a time; ``g`` moves to the next (the target's GPUs first)."""

    DEFAULT_CSS = """
    GpuPanel { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.selected: int | None = None  # NVML index; None: the first in the view's order
        self.border_title = "GPU"

    def show(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._title()
        self.refresh(layout=True)

    def next_device(self) -> int | None:
        """Select the next GPU in the view's order; returns its NVML index (None: no GPU)."""
        view = self.snapshot.nvml if self.snapshot is not None else None
        if view is None or not view.devices:
            return None
        position = (selected_position(view, self.selected) + 1) % len(view.devices)
        self.selected = view.devices[position].index
        self._title()
        self.refresh(layout=True)
        return self.selected

    def _title(self) -> None:
        view = self.snapshot.nvml if self.snapshot is not None else None
        if view is None or not view.devices:
            self.border_title = "GPU"
            return
        position = selected_position(view, self.selected)
        d = view.devices[position]
        more = f" ({position + 1}/{len(view.devices)}, g: next)" if len(view.devices) > 1 else ""
        self.border_title = f"GPU {d.index} · {d.name or '?'}{more}"

    @property
    def compact(self) -> bool:
        return self.screen.has_class("-compact") if self.is_mounted else False

    def render(self) -> Text:
        return render_gpu(self.snapshot, self.content_region.width or 80, self.selected, self.compact)


__all__ = ["GpuPanel", "GpuSeries", "render_gpu", "gpu_sparkline"]
