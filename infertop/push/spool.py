"""Requests kept on disk while the backend is down, oldest sent first, up to a size limit
(past it the oldest go, counted as dropped). One file per request: a JSON header line (the
URL, when it was made) and the body; the auth headers are never written. A spool folder is
held by one infertop at a time (an flock); a second one spools beside it in ``DIR.PID`` and
removes that folder when it ends empty."""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass

SUFFIX = ".push"


@dataclass(frozen=True)
class Entry:
    url: str
    body: bytes
    t: float  # when the request was made (unix s)
    path: str = ""  # the file holding it, once spooled


class Spool:
    def __init__(self, folder: str, limit_bytes: int) -> None:
        self.limit = max(0, int(limit_bytes))
        self.folder = folder
        self.own_folder = False  # a DIR.PID of this run: removed at close when empty
        self._lock_fd: int | None = None
        self._seq = 0
        self.dropped = 0
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not self._lock(folder):
            self.folder = f"{folder}.{os.getpid()}"
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            self.own_folder = True
            self._lock(self.folder)
        self._files = sorted(f for f in os.listdir(self.folder) if f.endswith(SUFFIX))
        self.bytes = sum(self._size(f) for f in self._files)

    def _lock(self, folder: str) -> bool:
        fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def _size(self, name: str) -> int:
        try:
            return os.path.getsize(os.path.join(self.folder, name))
        except OSError:
            return 0

    def __len__(self) -> int:
        return len(self._files)

    def put(self, e: Entry) -> bool:
        """Keep ``e`` (atomically: a half-written file is never read back); False when it
        cannot be (bigger than the whole limit, or the disk refused)."""
        head = json.dumps({"url": e.url, "t": e.t}).encode() + b"\n"
        size = len(head) + len(e.body)
        if size > self.limit:
            return False
        while self._files and self.bytes + size > self.limit:
            self._remove(self._files[0])
            self.dropped += 1
        self._seq += 1
        # by when it was made, to the microsecond: the sender spools a request it was sending
        # after the ones made just behind it, often in the same millisecond (2026-12-07: sent
        # 1, 0, 2, ...); a name of the older milliseconds' format sorts the same way
        name = f"{int(e.t * 1e6):018d}-{os.getpid()}-{self._seq:06d}{SUFFIX}"
        path = os.path.join(self.folder, name)
        tmp = path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(head)
                f.write(e.body)
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        self._files.append(name)
        self._files.sort()
        self.bytes += size
        return True

    def oldest(self) -> Entry | None:
        """The oldest request kept (a file that cannot be read is removed and counted)."""
        while self._files:
            name = self._files[0]
            path = os.path.join(self.folder, name)
            try:
                with open(path, "rb") as f:
                    head = json.loads(f.readline())
                    body = f.read()
                return Entry(str(head["url"]), body, float(head.get("t", 0.0)), path)
            except (OSError, ValueError, KeyError, TypeError):
                self._remove(name)
                self.dropped += 1
        return None

    def remove(self, e: Entry) -> None:
        name = os.path.basename(e.path)
        if name in self._files:
            self._remove(name)

    def _remove(self, name: str) -> None:
        self.bytes -= self._size(name)
        try:
            os.unlink(os.path.join(self.folder, name))
        except OSError:
            pass
        self._files.remove(name)
        self.bytes = max(0, self.bytes)

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self.own_folder and not self._files:
            try:
                os.unlink(os.path.join(self.folder, ".lock"))
                os.rmdir(self.folder)
            except OSError:
                pass


def default_folder() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "infertop", "push-spool")
