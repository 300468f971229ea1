"""Ids in a recording are defined before they are used: frames 0, 1, 2, ... in order, stacks
that name defined frames, sample windows that name defined stacks (docs/recording-format.md).
A record that breaks this decodes, but would send replay, report and export after ids that do
not exist; the readers treat it as damage, like a record that does not decode."""

from __future__ import annotations

from collections.abc import Iterable

from infertop.model.events import CallSamples, Event, FrameDef, SampleWindow, StackDef


class References:
    """Follows the definitions of one recording, in file order."""

    def __init__(self) -> None:
        self.frames = 0
        self.stacks = 0

    def check(self, events: Iterable[Event | None]) -> None:
        """Raise ValueError at the first event that skips an id or names an undefined one."""
        for ev in events:
            match ev:
                case SampleWindow():
                    for _tid, sid, _n in ev.counts:
                        if not 0 <= sid < self.stacks:
                            raise ValueError(f"a sample names undefined stack {sid}")
                case CallSamples():
                    for _tid, _t, sid in ev.samples:
                        if not 0 <= sid < self.stacks:
                            raise ValueError(f"a call sample names undefined stack {sid}")
                case FrameDef():
                    if ev.frame_id > self.frames or ev.frame_id < 0:
                        raise ValueError(f"frame {ev.frame_id} defined out of order")
                    self.frames = max(self.frames, ev.frame_id + 1)
                case StackDef():
                    if ev.stack_id > self.stacks or ev.stack_id < 0:
                        raise ValueError(f"stack {ev.stack_id} defined out of order")
                    if any(not 0 <= f < self.frames for f in ev.frames):
                        raise ValueError(f"stack {ev.stack_id} names an undefined frame")
                    self.stacks = max(self.stacks, ev.stack_id + 1)
