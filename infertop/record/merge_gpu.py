"""NVML readings of several recordings made one series (``infertop merge``).

A GPU reading (code 13) is a picture of *every* GPU of one host at one moment, its devices
numbered by that host's NVML. Kept as recorded, two hosts' ``GPU 0`` would be one device to
every reader, and readings of two hosts taken in turn would make the GPU panel jump between
them. So the merged recording gets readings of its own:

- **Devices.** A GPU is known by its UUID (unique to the physical GPU, so two recordings of one
  host — two services — see the same device once); without a UUID by (input, index). Each
  distinct GPU gets an index of the output, in input order then NVML order (the first input's
  GPUs keep theirs), and its name says where it is: ``web2 GPU 0 · NVIDIA H100 80GB HBM3``
  (the host from the input's clock anchor, else the file's name). An input that is itself a
  merged recording keeps its names.
- **Time.** Readings of all inputs, in time order, are taken in groups: a group closes when an
  input comes round again or one sampling interval (the shortest of the inputs' median
  intervals) has passed since the group's first reading. Each group is one output reading at
  its newest reading's time, holding the newest reading of *every* input that is not stale
  (taken within twice its own interval): an input read less often than another has its
  reading repeated in between, and an input whose recording has ended drops out.
- **Processes.** ``processes`` lists host pids. An input's own processes are renamed as merge
  renamed them (``pmap``); inputs of one host share its pid namespace, so their maps are
  shared; any other pid of the list that is a process of the output (another host's) is given a
  synthetic id, so that no process is credited with another host's memory. ``process_memory``
  stays what the input's target used; a GPU seen by two inputs of one host sums them.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field, replace

from infertop.model.gpu import GpuDeviceReading, GpuReading
from infertop.record.remap import IdRemap

DEFAULT_INTERVAL = 0.5  # the NVML collector's


@dataclass
class _Input:
    label: str  # the host, else the file's name
    host: str | None
    relabel: bool  # False: a merged recording, its devices already named
    pmap: dict[int, int]
    readings: list[GpuReading] = field(default_factory=list)

    def interval(self) -> float | None:
        steps = [b.t - a.t for a, b in zip(self.readings, self.readings[1:]) if b.t > a.t]
        return statistics.median(steps) if steps else None


class GpuMerge:
    def __init__(self) -> None:
        self.inputs: list[_Input] = []

    def add(self, path: str, host: str | None, nested: bool, pmap: dict[int, int]) -> list[GpuReading]:
        """A new input; append its readings (times already moved by its offset) to the list."""
        label = host or os.path.basename(path)
        inp = _Input(label, host, not nested, dict(pmap))
        self.inputs.append(inp)
        return inp.readings

    # -- devices
    def _indexes(self) -> dict[tuple[object, ...], int]:
        """Device key -> output index; key ("uuid", U) or ("input", k, index)."""
        out: dict[tuple[object, ...], int] = {}
        for k, inp in enumerate(self.inputs):
            seen: dict[int, GpuDeviceReading] = {}
            for r in inp.readings:
                for d in r.devices:
                    seen.setdefault(d.index, d)
            for i in sorted(seen):
                key = _key(k, seen[i])
                if key not in out:
                    out[key] = len(out)
        return out

    def _pid_maps(self, taken: set[int], ids: IdRemap) -> list[dict[int, int]]:
        """Per input: a pid of its NVML process lists -> the output's."""
        by_host: dict[str, dict[int, int]] = {}
        for inp in self.inputs:
            if inp.host:
                by_host.setdefault(inp.host, {}).update(inp.pmap)
        foreign: dict[tuple[object, int], int] = {}
        out: list[dict[int, int]] = []
        for k, inp in enumerate(self.inputs):
            own = by_host.get(inp.host, inp.pmap) if inp.host else inp.pmap
            space: object = inp.host or k  # whose pid namespace
            m: dict[int, int] = {}
            for r in inp.readings:
                for d in r.devices:
                    for p, _ in d.processes:
                        if p in m:
                            continue
                        if p in own:
                            m[p] = own[p]
                        elif p in taken:  # another host's process has this pid in the output
                            if (space, p) not in foreign:
                                foreign[(space, p)] = ids.take(p)
                            m[p] = foreign[(space, p)]
                        else:
                            m[p] = p
            out.append(m)
        return out

    def readings(self, taken: set[int], ids: IdRemap) -> list[GpuReading]:
        """The output's readings, oldest first. ``taken``: the output's process pids; ``ids``:
        the merge's pid allocator (a renamed foreign pid takes a fresh id from it)."""
        if not any(inp.readings for inp in self.inputs):
            return []
        index = self._indexes()
        pids = self._pid_maps(taken, ids)
        steps = {k: inp.interval() for k, inp in enumerate(self.inputs)}
        known = [s for s in steps.values() if s]
        interval = min(known) if known else DEFAULT_INTERVAL
        stale = {k: 2 * (s or interval) for k, s in steps.items()}

        def row(k: int, d: GpuDeviceReading) -> GpuDeviceReading:
            inp = self.inputs[k]
            name = d.name
            if inp.relabel:
                name = f"{inp.label} GPU {d.index}" + (f" · {d.name}" if d.name else "")
            procs = tuple((pids[k].get(p, p), b) for p, b in d.processes)
            return replace(d, index=index[_key(k, d)], name=name, processes=procs)

        stream = sorted(
            ((r.t, k, n, r) for k, inp in enumerate(self.inputs) for n, r in enumerate(inp.readings)),
            key=lambda x: (x[0], x[1], x[2]),
        )
        latest: dict[int, GpuReading] = {}
        out: list[GpuReading] = []

        def emit(group: dict[int, GpuReading]) -> None:
            latest.update(group)
            t = max(r.t for r in group.values())
            devices: dict[int, tuple[float, GpuDeviceReading]] = {}
            for k in range(len(self.inputs)):
                r = latest.get(k)
                if r is None or t - r.t > stale[k]:
                    continue
                for d in r.devices:
                    new = row(k, d)
                    have = devices.get(new.index)
                    devices[new.index] = (r.t, new) if have is None else (r.t, _both(have, (r.t, new)))
            out.append(GpuReading(t, tuple(devices[i][1] for i in sorted(devices))))

        group: dict[int, GpuReading] = {}
        start = 0.0
        for t, k, _n, r in stream:
            if group and (k in group or t - start >= interval):
                emit(group)
                group = {}
            if not group:
                start = t
            group[k] = r
        if group:
            emit(group)
        return out


def _key(k: int, d: GpuDeviceReading) -> tuple[object, ...]:
    return ("uuid", d.uuid) if d.uuid else ("input", k, d.index)


def _both(a: tuple[float, GpuDeviceReading], b: tuple[float, GpuDeviceReading]) -> GpuDeviceReading:
    """One GPU read by two inputs (two recordings of one host): the newer reading's values,
    each input's target's memory summed, the process lists joined."""
    older, newer = sorted((a, b), key=lambda x: x[0])
    mem = [x for x in (older[1].process_memory, newer[1].process_memory) if x is not None]
    procs = dict(older[1].processes)
    procs.update(newer[1].processes)
    return replace(newer[1], process_memory=sum(mem) if mem else None, processes=tuple(procs.items()))
