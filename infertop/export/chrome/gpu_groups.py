"""Which Chrome track group each GPU's NVML counters go in.

A recording of one process keeps every GPU's counters in its one ``GPU`` group. With several
processes (``--children``, several PIDs, merged recordings) a GPU's counters go beside the
kernels of the process that uses it:

1. a GPU on which processes of the recording hold memory goes to the one holding the most
   (summed over every reading, so the choice does not flip as memory comes and goes);
2. otherwise, in a merged recording, a GPU named after its input (``web2 GPU 1 · ...``, as
   ``infertop merge`` names them) goes to that input's target: an idle GPU stays with its host;
3. otherwise the target's ``GPU`` group.

Decided in the export's first pass over the recording (``observe`` every event), used in the
second.
"""

from __future__ import annotations

import os

from infertop.model.events import MERGED_INPUT, Event, Marker, ProcessDef
from infertop.model.gpu import GpuReading


class GpuGroups:
    def __init__(self) -> None:
        self.session: set[int] = set()  # the recording's processes (besides its target)
        self.held: dict[int, dict[int, int]] = {}  # device index -> pid -> bytes summed
        self.names: dict[int, str] = {}  # device index -> its name
        self.inputs: list[tuple[str, int]] = []  # merged input: (label, its target's pid)

    def observe(self, ev: Event) -> None:
        match ev:
            case GpuReading():
                for d in ev.devices:
                    if d.name:
                        self.names.setdefault(d.index, d.name)
                    held = self.held.setdefault(d.index, {})
                    for pid, size in d.processes:
                        held[pid] = held.get(pid, 0) + size
            case ProcessDef():
                self.session.add(ev.pid)
            case Marker() if ev.text == MERGED_INPUT:
                target = ev.extra.get("target", "")
                label = ev.extra.get("host") or os.path.basename(ev.extra.get("input", ""))
                if target.isdigit() and label:
                    self.inputs.append((label, int(target)))

    def owners(self, target: int | None) -> dict[int, int]:
        """Device index -> the recorded pid whose group gets its counters; a device not listed
        stays in the target's group."""
        session = self.session | ({target} if target is not None else set())
        out: dict[int, int] = {}
        for index in sorted(set(self.held) | set(self.names)):
            ours = {p: b for p, b in self.held.get(index, {}).items() if p in session and b > 0}
            if ours:
                out[index] = max(sorted(ours), key=ours.__getitem__)
                continue
            name = self.names.get(index, "")
            for label, its_target in self.inputs:
                if name.startswith(f"{label} GPU "):
                    out[index] = its_target
                    break
        return {i: p for i, p in out.items() if p != target}
