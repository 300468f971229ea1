"""Process and thread ids made unique when recordings or traces from several machines (or
several ranks of one job) become one recording: an id keeps its value when it is free, and a
colliding one gets a free value counting down from the top of Linux's id range, so that it
can never meet a real pid or tid of the same host and reads as synthetic."""

from __future__ import annotations

#: Linux pids and tids stay below 2**22 (``pid_max``'s ceiling); the Chrome export keeps the
#: bits above it for its own track ids, so remapped ids stay below it too
ID_LIMIT = 1 << 22


class IdRemap:
    def __init__(self) -> None:
        self.used: set[int] = set()
        self._next = ID_LIMIT - 1

    def take(self, want: int) -> int:
        """``want`` itself when it is a free, positive id below ``ID_LIMIT``; else a fresh one."""
        if 0 < want < ID_LIMIT and want not in self.used:
            self.used.add(want)
            return want
        while self._next in self.used:
            self._next -= 1
        if self._next <= 0:
            raise ValueError("no free ids left")
        self.used.add(self._next)
        return self._next
