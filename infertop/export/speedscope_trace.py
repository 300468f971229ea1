"""speedscope from a torch.profiler trace: one *evented* profile per CPU thread, its ops and
annotations opened and closed in time order (ranges that do not nest with the first ones kept
are left out, as speedscope needs balanced events)."""

from __future__ import annotations

import os

import numpy as np

from infertop import __version__
from infertop.export.jsonout import JsonStream
from infertop.export.lanes import StartOrderedLanes
from infertop.export.prelude import ExportResult, read_trace_to_export
from infertop.trace.table import CAT

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
CPU = (CAT["cpu_op"], CAT["user_annotation"])


def export_speedscope_trace(path: str, out: str) -> ExportResult:
    trace = read_trace_to_export(path)
    idx = np.flatnonzero(np.isin(trace.cat, CPU))
    frame_of: dict[int, int] = {}
    frames: list[dict] = []
    profiles: list[dict] = []
    if len(idx):
        t0 = float(trace.ts[idx].min())
        start = np.round((trace.ts[idx] - t0) * 1000).astype(np.int64)
        end = np.maximum(
            np.round((trace.ts[idx] + trace.dur[idx] - t0) * 1000).astype(np.int64), start
        )
        order = np.lexsort((-(end - start), start, trace.tid[idx], trace.pid[idx]))
        groups: dict[tuple[int, int], list[int]] = {}
        for k in order.tolist():
            i = int(idx[k])
            groups.setdefault((int(trace.pid[i]), int(trace.tid[i])), []).append(k)
        for (pid, tid), ks in groups.items():
            lanes = StartOrderedLanes(max_lanes=1)
            events: list[dict] = []
            open_: list[tuple[int, int]] = []  # (end, frame)
            last = 0
            for k in ks:
                s, e = int(start[k]), int(end[k])
                if lanes.place(s, e) is None:
                    continue
                while open_ and open_[-1][0] <= s:
                    at, closed = open_.pop()
                    events.append({"type": "C", "at": at / 1000, "frame": closed})
                nid = int(trace.name[idx[k]])
                fr = frame_of.get(nid)
                if fr is None:
                    fr = frame_of[nid] = len(frames)
                    frames.append({"name": trace.names[nid]})
                events.append({"type": "O", "at": s / 1000, "frame": fr})
                open_.append((e, fr))
                last = max(last, e)
            while open_:
                at, closed = open_.pop()
                events.append({"type": "C", "at": at / 1000, "frame": closed})
            if events:
                profiles.append(
                    {
                        "type": "evented",
                        "name": f"pid {pid} thread {tid}",
                        "unit": "microseconds",
                        "startValue": events[0]["at"],
                        "endValue": last / 1000,
                        "events": events,
                    }
                )
    profiles.sort(key=lambda p: -(p["endValue"] - p["startValue"]))
    doc = JsonStream(out)
    try:
        doc.write(
            doc.value(
                {
                    "$schema": SCHEMA,
                    "exporter": f"infertop {__version__}",
                    "name": f"infertop {os.path.basename(path)}",
                    "activeProfileIndex": 0,
                    "profiles": profiles,
                    "shared": {"frames": frames},
                }
            )
        )
        doc.write(b"\n")
        doc.commit()
    except BaseException:
        doc.abort()
        raise
    return ExportResult(out, sum(len(p["events"]) for p in profiles))
