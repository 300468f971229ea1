"""CUDA memory snapshots from the agent (docs/memory-snapshot.md): ask for one, collect the file
the agent wrote into its socket folder, and read what it holds without trusting it.

The agent pickles ``torch.cuda.memory._snapshot()`` exactly as ``_dump_snapshot`` does; the file
is copied byte for byte, so it opens in PyTorch's memory viewer (https://pytorch.org/memory_viz).
infertop never unpickles it with ``pickle.load``: the file comes from another process, and a
pickle can name any callable. ``read_summary`` reads it with an unpickler that refuses every
class and function (a snapshot is dicts, lists, tuples, strings and numbers only).
"""

from __future__ import annotations

import io
import os
import pickle
import re
import shutil
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infertop import procfs
from infertop.agent import protocol
from infertop.errors import (
    BadInputFile,
    InfertopError,
    TargetNotFound,
    TargetUnsupported,
    UsageError,
)

#: the names the agent gives its snapshot files (payload/snapshot.py)
FILE_NAME = re.compile(r"^memsnap-\d+-\d+\.pickle$")
VIEWER = "https://pytorch.org/memory_viz"
#: how long past its ``seconds`` a snapshot may take to be taken, pickled and written
WRITE_SLACK_S = 120.0


@dataclass(frozen=True)
class SnapshotSummary:
    """What a snapshot holds, for the line that says it was written."""

    segments: int
    reserved_bytes: int  # the segments' total_size: what the caching allocator holds
    allocated_bytes: int  # their blocks in state active_allocated
    blocks: int
    trace_entries: int  # the history's alloc/free/segment/oom entries, all devices
    devices: int  # device_traces' length
    ooms: int  # "oom" entries in the history


class _NoObjects(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a memory snapshot holds no objects ({module}.{name})")


def read_summary(data: bytes) -> SnapshotSummary:
    """A snapshot's counts, read from its pickled bytes; ``BadInputFile`` when it is not one."""
    try:
        snap = _NoObjects(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001 - any failure to read is "not a snapshot"
        raise BadInputFile(f"not a PyTorch memory snapshot: {exc}") from None
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list):
        raise BadInputFile("not a PyTorch memory snapshot: no `segments` list")
    traces = snap.get("device_traces", [])
    if not isinstance(traces, list):
        raise BadInputFile("not a PyTorch memory snapshot: `device_traces` is not a list")
    reserved = allocated = blocks = 0
    for seg in snap["segments"]:
        if not isinstance(seg, dict):
            raise BadInputFile("not a PyTorch memory snapshot: a segment is not a dict")
        reserved += int(seg.get("total_size", 0))
        for block in seg.get("blocks", ()):
            blocks += 1
            if isinstance(block, dict) and block.get("state") == "active_allocated":
                allocated += int(block.get("size", 0))
    entries = [e for trace in traces if isinstance(trace, list) for e in trace]
    ooms = sum(1 for e in entries if isinstance(e, dict) and e.get("action") == "oom")
    return SnapshotSummary(
        len(snap["segments"]), reserved, allocated, blocks, len(entries), len(traces), ooms
    )


def describe(summary: SnapshotSummary) -> str:
    def mib(n: int) -> str:
        return f"{n / 2**20:.1f} MiB"

    text = (
        f"{summary.segments} segment(s), {mib(summary.reserved_bytes)} reserved, "
        f"{mib(summary.allocated_bytes)} allocated, {summary.trace_entries} history entries"
    )
    return text + (f", {summary.ooms} out-of-memory event(s)" if summary.ooms else "")


def collect(socket_path: str, agent_path: str, dest: str) -> bytes:
    """Copy the file the agent named (a file of its socket folder, seen from here: in a
    container the folder is under ``/proc/PID/root``) to ``dest`` and remove the agent's copy;
    returns its bytes. Only a plain file of the agent's folder with an agent's file name, owned
    by the folder's owner, is read."""
    name = os.path.basename(str(agent_path))
    if not FILE_NAME.match(name):
        raise TargetUnsupported(f"the agent named an unexpected snapshot file: {agent_path!r}")
    folder = os.path.dirname(socket_path)
    path = os.path.join(folder, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise TargetUnsupported(
            f"cannot open the agent's snapshot {path}: {exc.strerror}"
        ) from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.stat(folder).st_uid:
            raise TargetUnsupported(f"refusing {path}: not a plain file of the agent's user")
        data = fh.read()
    try:
        os.unlink(path)
    except OSError:
        pass
    write_file(dest, data)
    return data


def write_file(dest: str, data: bytes) -> None:
    """``data`` to ``dest`` through a temporary file beside it (never half a file)."""
    tmp = f"{dest}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as out:
            out.write(data)
        shutil.move(tmp, dest)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise UsageError(f"cannot write {dest}: {exc.strerror or exc}") from None


def _unavailable(reply: dict[str, Any]) -> InfertopError:
    reason = str(reply.get("reason") or "the agent could not record a snapshot")
    if reply.get("why") in ("no-cuda", "no-torch"):
        return TargetUnsupported(reason, "run it on a process that uses a CUDA device")
    if reply.get("why") == "busy":
        return TargetUnsupported(reason, "wait until it ends and ask again")
    return TargetUnsupported(reason)


def take(
    socket_path: str,
    pid: int,
    seconds: float,
    dest: str,
    max_entries: int | None = None,
    progress: Callable[[str], None] | None = None,
    alive: Callable[[], bool] | None = None,
) -> SnapshotSummary:
    """Ask the agent at ``socket_path`` for a snapshot of ``seconds`` of history and write it to
    ``dest``. Raises ``TargetUnsupported`` (no CUDA, no torch, busy), ``TargetNotFound`` (the
    target went away meanwhile), ``TargetUnsupported`` (the agent failed) or ``UsageError``
    (``dest`` cannot be written)."""
    say = progress or (lambda _text: None)
    try:
        refused = protocol.check_socket(socket_path)
        sock = None if refused else protocol.connect(socket_path, timeout=5.0)
    except OSError as exc:
        raise TargetUnsupported(
            f"cannot reach the agent at {socket_path}: {exc.strerror or exc}"
        ) from None
    if sock is None:
        raise TargetUnsupported(f"refusing the agent socket: {refused}")
    try:
        protocol.send_msg(sock, {"v": protocol.VERSION, "cmd": "hello", "client": "infertop"})
        conn = _Conn(sock, pid, alive)
        conn.wait(lambda m: m.get("type") == "hello", 10.0)
        ask: dict[str, Any] = {"v": protocol.VERSION, "cmd": "memory_snapshot", "seconds": seconds}
        if max_entries is not None:
            ask["max_entries"] = max_entries
        protocol.send_msg(sock, ask)
        reply = conn.wait(_answer("memory_snapshot"), 10.0)
        if reply.get("type") == "error":
            raise TargetUnsupported(
                f"the agent refused the snapshot: {reply.get('message', '?')}",
                "an older agent: let it leave (20 s without a client) and try again",
            )
        if not reply.get("started"):
            raise _unavailable(reply)
        say(f"recording the CUDA allocator's history for {seconds:g} s…")
        done = conn.wait(lambda m: m.get("type") == "memory_snapshot", seconds + WRITE_SLACK_S)
        if "error" in done or "path" not in done:
            raise TargetUnsupported(
                f"the agent could not write the snapshot: {done.get('error', '?')}"
            )
        say(f"copying {int(done.get('bytes', 0)) / 2**20:.1f} MiB…")
        data = collect(socket_path, str(done["path"]), dest)
    finally:
        try:  # an injected agent then leaves at once; an armed one waits for the next client
            protocol.send_msg(sock, {"v": protocol.VERSION, "cmd": "detach"})
        except (OSError, protocol.ProtocolError):
            pass
        sock.close()
    return read_summary(data)


def _answer(cmd: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == "error" or (m.get("type") == "ok" and m.get("cmd") == cmd)


class _Conn:
    """The socket with one frame reader: a message read along with another is kept."""

    def __init__(self, sock: socket.socket, pid: int, alive: Callable[[], bool] | None) -> None:
        self.sock = sock
        self.pid = pid
        self.alive = alive
        self.reader = protocol.FrameDecoder()
        self.pending: list[dict[str, Any]] = []

    def wait(self, want: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        """The first message ``want`` accepts, within ``timeout``; others are skipped."""
        self.sock.settimeout(0.5)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while self.pending:
                msg = self.pending.pop(0)
                if want(msg):
                    return msg
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                if self.alive is not None and not self.alive():
                    raise _gone(self.pid) from None
                continue
            except OSError as exc:
                raise _gone(self.pid, exc.strerror) from None
            if not data:
                raise _gone(self.pid)
            self.pending += self.reader.feed(data)
        raise TargetUnsupported(f"no answer from the agent in pid {self.pid} within {timeout:g} s")


#: a killed process closes its files before it is a zombie: how long a closed connection waits
#: for its process to finish dying before it is the agent's doing
DYING_S = 1.0


def _gone(pid: int, why: str | None = None) -> InfertopError:
    deadline = time.monotonic() + DYING_S
    while procfs.state(pid) not in (None, "Z", "X"):  # gone, or dead and not yet reaped
        if time.monotonic() > deadline:
            return TargetUnsupported(
                f"the agent in pid {pid} closed the connection ({why or 'no reason given'})"
            )
        time.sleep(0.02)
    return TargetNotFound(f"pid {pid} exited before its snapshot was written")


# -- inside a live session (the UI's key, watch --oom-snapshot): AgentCollector's lines -------


def snapshot_answer(cmd: str, reply: dict[str, Any]) -> str:
    """The status line for the agent's answer to ``memory_snapshot`` or ``oom_snapshot``."""
    if reply.get("type") == "error":
        return f"{cmd.replace('_', ' ')}: this agent cannot ({reply.get('message', '?')})"
    if cmd == "oom_snapshot":
        if reply.get("armed"):
            return "a CUDA memory snapshot will be written on an out-of-memory error"
        return f"no snapshot on out-of-memory: {reply.get('reason', '?')}"
    if reply.get("started"):
        return f"CUDA memory snapshot: recording {float(reply.get('seconds', 0)):g} s of history…"
    return f"no CUDA memory snapshot: {reply.get('reason', '?')}"


def oom_snapshot_path(folder: str | None, msg: dict[str, Any]) -> str | None:
    """Where an out-of-memory snapshot goes: ``oom-snapshot-<UTC time>-pid<P>-dev<N>.pickle``
    (P as the target sees itself, from the agent's file name), never over an existing file."""
    if not folder:
        return None
    t = msg.get("t")
    stamp = time.strftime(
        "%Y%m%dT%H%M%SZ", time.gmtime(t if isinstance(t, (int, float)) else time.time())
    )
    name = os.path.basename(str(msg.get("path", "")))
    pid = f"-pid{name.split('-')[1]}" if FILE_NAME.match(name) else ""
    device = msg.get("device")
    dev = f"-dev{device}" if isinstance(device, int) else ""
    stem = os.path.join(folder, f"oom-snapshot-{stamp}{pid}{dev}")
    path, n = f"{stem}.pickle", 2
    while os.path.exists(path):
        path, n = f"{stem}-{n}.pickle", n + 1
    return path


def is_snapshot_note(message: str) -> bool:
    """True for a status line of the agent client that says what came of a snapshot."""
    return "memory snapshot" in message or "out-of-memory" in message


def collect_quietly(socket_path: str, msg: dict[str, Any], dest: str | None) -> str:
    """Copy the snapshot a ``memory_snapshot`` message names to ``dest``; the line that says
    where it went (or why not). Never raises."""
    what = "out-of-memory snapshot" if msg.get("trigger") == "oom" else "CUDA memory snapshot"
    if "error" in msg or "path" not in msg:
        return f"no {what}: {msg.get('error', 'the agent wrote none')}"
    if dest is None:  # nobody asked for it here: the agent's copy goes
        try:
            name = os.path.basename(str(msg["path"]))
            if FILE_NAME.match(name):
                os.unlink(os.path.join(os.path.dirname(socket_path), name))
        except OSError:
            pass
        return f"{what} dropped: no folder to write it to"
    try:
        data = collect(socket_path, str(msg["path"]), dest)
    except InfertopError as exc:
        return f"{what} not copied: {exc.message}"
    try:
        summary = describe(read_summary(data))
    except BadInputFile as exc:
        summary = exc.message
    return f"{what} written to {dest} ({summary}); open it at {VIEWER}"
