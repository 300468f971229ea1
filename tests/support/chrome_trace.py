"""A structural validator for Chrome traces (the Trace Event Format), written from the format's
documentation and from what Perfetto and chrome://tracing accept.

Checks: the document shape; every event's phase and required fields; numeric ``ts``/``dur``
(finite, not negative); balanced B/E per track in time order; proper nesting of all slices on
each track (Perfetto drops slices that overlap without nesting); numeric counter values;
metadata events naming processes and threads; flow events that pair up and bind to a slice.
Times are compared as Perfetto stores them: integer nanoseconds, ``round(µs × 1000)`` of each
``ts`` and ``dur`` separately (so ``ts + dur`` carries no floating-point error).
``validate`` returns a list of problems (empty when the trace is valid) and some counts.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

PHASES = set("BEXIiCMsftbnePONDRcv") | {"(", ")"}
METADATA = {
    "process_name": ("name", str),
    "thread_name": ("name", str),
    "process_sort_index": ("sort_index", int),
    "thread_sort_index": ("sort_index", int),
    "process_labels": ("labels", str),
    "process_uptime_seconds": ("uptime", (int, float)),
    "num_cpus": ("number", int),
}


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    tracks: dict[tuple[Any, Any], list[tuple[float, float, str]]] = field(default_factory=dict)
    names: dict[tuple[Any, Any], str] = field(default_factory=dict)

    def bad(self, msg: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(msg)


def load(path: str) -> Any:
    with open(path, "rb") as fh:
        raw = fh.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def _ns(x: float) -> int:
    return round(x * 1000)


def _num(x: Any) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def validate(doc: Any) -> Report:
    rep = Report()
    if isinstance(doc, list):
        events = doc
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
        unit = doc.get("displayTimeUnit")
        if unit is not None and unit not in ("ms", "ns"):
            rep.bad(f"displayTimeUnit {unit!r} is neither 'ms' nor 'ns'")
    else:
        rep.bad("neither a JSON array of events nor an object with a traceEvents array")
        return rep
    slices: dict[tuple[Any, Any], list[tuple[float, float, int, str]]] = defaultdict(list)
    flows: dict[tuple[Any, Any], dict[str, list[tuple[float, Any, Any, str | None]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    be: dict[tuple[Any, Any], list[tuple[float, int, str, str]]] = defaultdict(list)
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            rep.bad(f"event {i} is not an object")
            continue
        ph = ev.get("ph")
        if not isinstance(ph, str) or ph not in PHASES:
            rep.bad(f"event {i}: unknown phase {ph!r}")
            continue
        rep.counts[ph] += 1
        pid, tid = ev.get("pid"), ev.get("tid")
        # every event names its process; thread-bound ones (slices, flows) their thread too
        needs_tid = ph not in ("M", "C") and not (ph in ("i", "I") and ev.get("s") in ("g", "p"))
        if type(pid) is not int or (needs_tid and type(tid) is not int):
            rep.bad(f"event {i} ({ph}): pid/tid must be integers, got {pid!r}/{tid!r}")
            continue
        if ph == "M":
            spec = METADATA.get(ev.get("name"))
            args = ev.get("args")
            if spec is None:
                rep.bad(f"event {i}: unknown metadata {ev.get('name')!r}")
            elif not isinstance(args, dict) or not isinstance(args.get(spec[0]), spec[1]):
                rep.bad(f"event {i}: metadata {ev['name']} needs args.{spec[0]} of type {spec[1]}")
            elif ev["name"] in ("thread_name", "process_name"):
                rep.names[(pid, tid if ev["name"] == "thread_name" else None)] = args["name"]
            continue
        ts = ev.get("ts")
        if not _num(ts):
            rep.bad(f"event {i} ({ph}): ts must be a finite number, got {ts!r}")
            continue
        if ts < 0:
            rep.bad(f"event {i} ({ph}): negative ts {ts}")
        key = (pid, tid)
        if ph == "X":
            dur = ev.get("dur")
            if not _num(dur) or dur < 0:
                rep.bad(f"event {i}: X needs a finite dur >= 0, got {dur!r}")
                continue
            if not isinstance(ev.get("name"), str):
                rep.bad(f"event {i}: X without a name")
            slices[key].append((_ns(ts), _ns(ts) + _ns(dur), i, str(ev.get("name"))))
        elif ph in ("B", "E"):
            if ph == "B" and not isinstance(ev.get("name"), str):
                rep.bad(f"event {i}: B without a name")
            be[key].append((_ns(ts), i, ph, str(ev.get("name"))))
        elif ph == "C":
            args = ev.get("args")
            if not isinstance(ev.get("name"), str):
                rep.bad(f"event {i}: counter without a name")
            if not isinstance(args, dict) or not args:
                rep.bad(f"event {i}: counter {ev.get('name')!r} without values")
            elif not all(_num(v) for v in args.values()):
                rep.bad(f"event {i}: counter {ev.get('name')!r} has non-numeric values {args}")
        elif ph in ("i", "I"):
            if ev.get("s", "t") not in ("g", "p", "t"):
                rep.bad(f"event {i}: instant scope {ev.get('s')!r}")
        elif ph in ("s", "t", "f"):
            if (
                "id" not in ev
                or not isinstance(ev.get("cat"), str)
                or not isinstance(ev.get("name"), str)
            ):
                rep.bad(f"event {i}: flow event needs id, cat and name")
                continue
            flows[(ev["cat"], ev["id"])][ph].append((_ns(ts), pid, tid, ev.get("bp")))
        args = ev.get("args")
        if args is not None and not isinstance(args, dict):
            rep.bad(f"event {i}: args must be an object")
    # B/E: time order per track (stable, as viewers sort), balanced, each E closing the last B
    for key, items in be.items():
        items.sort(key=lambda r: (r[0], r[1]))
        stack: list[tuple[float, int, str]] = []
        for ts, i, ph, name in items:
            if ph == "B":
                stack.append((ts, i, name))
            elif not stack:
                rep.bad(f"track {key}: E at {ts} with no open B (event {i})")
            else:
                b_ts, b_i, b_name = stack.pop()
                slices[key].append((b_ts, ts, b_i, b_name))
        if stack:
            rep.bad(
                f"track {key}: {len(stack)} B without E (first: event {stack[0][1]} {stack[0][2]!r})"
            )
    # nesting: on each track every two slices are disjoint or one contains the other
    for key, items in slices.items():
        items.sort(key=lambda r: (r[0], -r[1], r[2]))
        stack2: list[tuple[float, float, int, str]] = []
        for s in items:
            while stack2 and stack2[-1][1] <= s[0]:
                stack2.pop()
            if stack2 and s[1] > stack2[-1][1]:
                p = stack2[-1]
                rep.bad(
                    f"track {key}: slice {s[3]!r} [{s[0]}, {s[1]}] overlaps {p[3]!r} [{p[0]}, {p[1]}] without nesting"
                )
                continue
            stack2.append(s)
        rep.tracks[key] = [(a, b, n) for a, b, _, n in items]
    # flows: every f has an s; both ends bind to a slice on their track. A point is inside a
    # slice [a, b) of its track when the latest end among the slices starting at or before it
    # lies after it (or a zero-length slice sits on it): a bisection per point, not a scan
    covers: dict[tuple, tuple[list[float], list[float], set[float]]] = {}

    def inside_a_slice(track: tuple, ts: float) -> bool:
        if track not in covers:
            rows = sorted((a, b) for a, b, _ in rep.tracks.get(track, ()))
            ends, top = [], float("-inf")
            for _a, b in rows:
                top = max(top, b)
                ends.append(top)
            covers[track] = ([a for a, _ in rows], ends, {a for a, b in rows if a == b})
        starts, ends, points = covers[track]
        i = bisect.bisect_right(starts, ts)
        return (i > 0 and ends[i - 1] > ts) or ts in points

    for (cat, fid), parts in flows.items():
        if not parts.get("s"):
            rep.bad(f"flow {cat}/{fid}: no start (s)")
        if not parts.get("f"):
            rep.bad(f"flow {cat}/{fid}: no end (f)")
        for ph, rows in parts.items():
            for ts, pid, tid, bp in rows:
                inside = inside_a_slice((pid, tid), ts)
                if not inside and not (ph == "f" and bp != "e"):
                    rep.bad(
                        f"flow {cat}/{fid}: {ph} at {ts} on track {(pid, tid)} is inside no slice"
                    )
    for key in rep.tracks:
        if key not in rep.names and key[1] is not None:
            rep.counts["unnamed_tracks"] += 1
    return rep
