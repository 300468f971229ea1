"""Interning of frames and stacks, so that a sample is three ints."""

from __future__ import annotations

from infertop.model.events import Event, Frame, FrameDef, StackDef


class SymbolTable:
    """Assigns dense ids to frames and stacks; emits a definition event for each new one."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.stacks: list[tuple[int, ...]] = []
        self._frame_ids: dict[Frame, int] = {}
        self._stack_ids: dict[tuple[int, ...], int] = {}

    def frame_id(self, frame: Frame, new: list[Event]) -> int:
        fid = self._frame_ids.get(frame)
        if fid is None:
            fid = len(self.frames)
            self.frames.append(frame)
            self._frame_ids[frame] = fid
            new.append(FrameDef(fid, frame))
        return fid

    def stack_id(self, frames: tuple[int, ...], new: list[Event]) -> int:
        sid = self._stack_ids.get(frames)
        if sid is None:
            sid = len(self.stacks)
            self.stacks.append(frames)
            self._stack_ids[frames] = sid
            new.append(StackDef(sid, frames))
        return sid

    def define_frame(self, ev: FrameDef) -> None:
        """Adopt a definition read from elsewhere (a recording); ids must arrive in order."""
        if ev.frame_id != len(self.frames):
            raise ValueError(f"frame id {ev.frame_id} out of order (expected {len(self.frames)})")
        self.frames.append(ev.frame)
        self._frame_ids[ev.frame] = ev.frame_id

    def define_stack(self, ev: StackDef) -> None:
        if ev.stack_id != len(self.stacks):
            raise ValueError(f"stack id {ev.stack_id} out of order (expected {len(self.stacks)})")
        if any(f < 0 or f >= len(self.frames) for f in ev.frames):
            raise ValueError(f"stack {ev.stack_id} names an undefined frame")
        self.stacks.append(ev.frames)
        self._stack_ids[ev.frames] = ev.stack_id

    def learn(self, ev: FrameDef | StackDef) -> None:
        """Adopt a definition met in a stream of events (a recording replayed or exported) when
        it is the next id; one already known (a repeat) changes nothing."""
        if isinstance(ev, FrameDef):
            if ev.frame_id == len(self.frames):
                self.define_frame(ev)
        elif ev.stack_id == len(self.stacks):
            self.define_stack(ev)

    def stack_frames(self, stack_id: int) -> list[Frame]:
        return [self.frames[f] for f in self.stacks[stack_id]]
