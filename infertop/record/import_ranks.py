"""`infertop import DIR`: a directory with one torch.profiler trace per rank becomes one
recording with one process per rank.

Each trace is reduced into op windows exactly as a single trace is (``import_kineto``); its
windows carry the rank's process id (format 1.4), its threads are defined with that process
(``ThreadDef(tid, name, pid)``), and a ``ProcessDef(pid, 0, "rank N (FILE)")`` names it. The
process id is the trace's own pid when no other rank has it, else a free synthetic one
(``remap.IdRemap``); the same for thread ids. The rank is the trace's ``distributedInfo.rank``
when every trace has a distinct one, else the file's place in the directory.

Clock: each rank's times are its own host's (Kineto's ``baseTimeNanoseconds`` or unix µs).
Ranks of one host share one clock, so their steps line up exactly; ranks of different hosts
line up only as well as those hosts' clocks agree (NTP: typically within a few ms).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from infertop.errors import BadInputFile
from infertop.model.events import (
    CollectorStatus,
    Event,
    Marker,
    OpWindow,
    ProcessDef,
    StageRules,
    TargetInfo,
    ThreadDef,
)
from infertop.record.import_kineto import (
    ImportResult,
    Progress,
    RankInfo,
    read_windows,
    write_recording,
)
from infertop.record.remap import IdRemap
from infertop.trace.table import KinetoTrace, read_trace

if TYPE_CHECKING:
    from collections.abc import Callable

CLOCK_NOTE = (
    "ranks on one host share its clock and line up exactly; ranks on different hosts line up "
    "only as well as those hosts' clocks agree"
)


@dataclass(frozen=True)
class _Rank:
    rank: int | None  # distributedInfo.rank
    pid: int | None  # the trace's (its CPU ops' most common pid)
    main_tid: int | None  # the op thread
    events: int


def rank_label(rank: int, file: str) -> str:
    """The process's command line in the recording: ``rank 3 (trace_rank3.json.gz)``."""
    return f"rank {rank} ({os.path.basename(file)})"


@dataclass(frozen=True)
class RankEvents:
    """A directory of rank traces as a recording's events, before any is written."""

    prelude: list[Event]  # target, processes, threads, statuses, the import marker
    windows: list[OpWindow]  # every rank's, in time order
    ranks: tuple[RankInfo, ...]
    events: int  # the traces' events
    seconds: float
    notes: list[str]  # the clock; ranks numbered by file; traces left out


def rank_events(
    path: str,
    files: list[str],
    say: Progress,
    each: Callable[[str, KinetoTrace], None] | None = None,
) -> RankEvents:
    """Every trace of ``files`` read (one in memory at a time) and made a process.
    ``each(file, trace)``: called with every trace that reads, before it is reduced (the
    report's per-rank trace report reads it there, so that no trace is read twice)."""
    pids, tids = IdRemap(), IdRemap()
    read: list[tuple[str, _Rank, list[OpWindow]]] = []
    skipped: list[str] = []
    for k, f in enumerate(files):
        say(f"rank file {k + 1} of {len(files)}: {os.path.basename(f)}")
        try:
            trace = read_trace(f)
            if each is not None:
                each(f, trace)
            plan, rank_windows = read_windows(f, say, trace)
        except BadInputFile as exc:  # use the ranks that read; say which did not
            skipped.append(f"{os.path.basename(f)} ({exc.message})")
            continue
        main = plan.main_ops[0] if plan.main_ops is not None else None
        read.append((f, _Rank(plan.trace.rank, plan.pid, main, plan.n), rank_windows))
        del plan, trace  # the trace's columns: one rank in memory at a time
    if not read:
        raise BadInputFile(f"{path}: none of its {len(files)} traces could be read: {skipped[0]}")
    given = [r.rank for _, r, _ in read]
    by_file = None in given or len(set(given)) < len(given)
    defs: list[Event] = []
    ranks: list[RankInfo] = []
    windows: list[OpWindow] = []
    n_events = 0
    t0 = min(w[0].t_start for *_, w in read)
    t1 = max(max(x.t_end for x in w) for *_, w in read)
    for k, (f, r, wins) in enumerate(read):
        rank = k if by_file or r.rank is None else r.rank
        own, main = r.pid, r.main_tid
        pid = pids.take(own if own is not None else 0)
        defs.append(ProcessDef(pid, 0, rank_label(rank, f)))
        threads: dict[int, int] = {}  # the trace's tid -> the recording's
        for tid in ([main] if main is not None else []) + sorted(
            {a.tid for w in wins for a in w.annotations}
        ):
            if tid not in threads:
                threads[tid] = tids.take(tid)
                defs.append(ThreadDef(threads[tid], f"thread {tid}", pid))
        for w in wins:
            ann = tuple(replace(a, tid=threads.get(a.tid, a.tid)) for a in w.annotations)
            windows.append(replace(w, pid=pid, annotations=ann))
        n_events += r.events
        ranks.append(RankInfo(rank, f, pid, own, len(wins), r.events))
    windows.sort(key=lambda w: w.t_end)  # replay plays events in time order
    first = ranks[0]
    prelude: list[Event] = [
        TargetInfo(pid=first.pid, cmdline=f"{len(ranks)} ranks of {os.path.abspath(path)}", started=t0),
        StageRules(()),
        *defs,
        CollectorStatus(t0, "py-spy", "unavailable", "imported torch.profiler traces: no Python samples"),
        CollectorStatus(t0, "agent", "stopped", f"imported from {len(ranks)} rank traces"),
        Marker(t0, "imported torch.profiler traces",
               {"traces": os.path.abspath(path), "ranks": str(len(ranks)), "clock": CLOCK_NOTE}),
    ]  # fmt: skip
    notes = [f"{len(ranks)} ranks, one process each; {CLOCK_NOTE}"]
    if by_file:
        notes.append("the traces do not each name a distinct rank: ranks are numbered by file order")
    if skipped:
        notes.append("left out: " + "; ".join(skipped))
    return RankEvents(prelude, windows, tuple(ranks), n_events, t1 - t0, notes)


def import_ranks(path: str, files: list[str], output: str, say: Progress) -> ImportResult:
    r = rank_events(path, files, say)
    write_recording(output, r.prelude, r.windows)
    return ImportResult(path, output, len(r.windows), r.events, r.seconds, "\n".join(r.notes), r.ranks)
