"""The agent protocol's wire format and socket rules (``docs/agent-protocol.md``, version 1).

This module is deliberately stdlib-only and self-contained: its source is also sent into target
processes, concatenated in front of the ``payload`` package's modules (see
``payload.payload_source``), and infertop's client (``collect/agent/client.py``) imports it, so
the framing and the socket rules have one source of truth on both ends. Keep it importable on
Python 3.8+ and free of imports from ``infertop``.

Framing: a 4-byte big-endian unsigned length, then that many bytes of UTF-8 JSON holding one
object that carries ``"v": 1``. Frames over ``MAX_FRAME`` bytes are a protocol error.

Errors: everything that can go wrong while reading a message is raised as :class:`ProtocolError`
(never anything else): :class:`ConnectionClosed` when the peer went away (cleanly or not),
:class:`MessageTimeout` when the socket's timeout expired (``partial`` tells whether bytes of a
frame were already consumed, i.e. whether the stream is now unusable), plain ``ProtocolError`` for
garbage. ``send_msg`` raises ``ConnectionClosed`` on socket errors and ``ProtocolError`` for a
message that cannot be encoded or is too big.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import struct

VERSION = 1
MAX_FRAME = 16 * 1024 * 1024
SOCKET_BASE = "/tmp"
_HEADER = struct.Struct(">I")
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class ProtocolError(Exception):
    """A malformed, oversized or unreadable frame; the connection should be closed.

    Raised by ``FrameDecoder.feed``, ``before`` holds the messages of the frames that came
    before the bad one in the data fed (a receiver may still act on them)."""

    before: list | tuple = ()


class ConnectionClosed(ProtocolError):
    """The peer closed the connection (or it broke)."""


class MessageTimeout(ProtocolError):
    """The socket timeout expired while waiting for a message.

    ``partial`` is False when no byte of the next frame had been read (the stream is intact and
    the caller may simply call ``recv_msg`` again), True when a frame was cut in the middle.
    """

    def __init__(self, message: str, partial: bool) -> None:
        super().__init__(message)
        self.partial = partial


class UnsafeSocketDir(Exception):
    """The socket directory exists but is not private to the expected user."""


# ---------------------------------------------------------------------------------------------
# encoding and decoding


def _reject_constant(name: str) -> float:
    raise ValueError("non-finite number %s" % name)


def encode_msg(obj: dict) -> bytes:
    """One frame (header + JSON) for ``obj``; ``"v": 1`` is added when missing."""
    if not isinstance(obj, dict):
        raise ProtocolError("a message must be a JSON object, not %s" % type(obj).__name__)
    if obj.get("v") != VERSION:
        obj = dict(obj)
        obj["v"] = VERSION
    try:
        body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ProtocolError("message cannot be encoded: %s" % exc) from None
    data = body.encode("utf-8", "surrogatepass")
    if len(data) > MAX_FRAME:
        raise ProtocolError("message of %d bytes exceeds the %d-byte limit" % (len(data), MAX_FRAME))
    return _HEADER.pack(len(data)) + data


def decode_body(data: bytes) -> dict:
    """The message in one frame's body (without the header)."""
    try:
        text = bytes(data).decode("utf-8")
        obj = json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError, TypeError, OverflowError) as exc:
        raise ProtocolError("frame is not UTF-8 JSON: %s" % (str(exc)[:200],)) from None
    if not isinstance(obj, dict):
        raise ProtocolError("frame holds %s, not a JSON object" % type(obj).__name__)
    if obj.get("v") != VERSION:
        raise ProtocolError("unsupported protocol version %r (expected %d)" % (obj.get("v"), VERSION))
    return obj


def _frame_length(header: bytes) -> int:
    (length,) = _HEADER.unpack(header)
    if length == 0:
        raise ProtocolError("empty frame")
    if length > MAX_FRAME:
        raise ProtocolError("frame of %d bytes exceeds the %d-byte limit" % (length, MAX_FRAME))
    return length


class FrameDecoder:
    """Incremental decoder for non-blocking readers: ``feed(bytes)`` returns complete messages."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need = 0  # body length of the frame being read, 0 while reading a header

    def feed(self, data: bytes) -> list:
        """The messages completed by ``data``; a bad frame raises ``ProtocolError`` (whose
        ``before`` are the messages completed ahead of it), after which the stream is broken."""
        out: list = []
        try:
            self._decode(data, out)
        except ProtocolError as exc:
            exc.before = out
            raise
        return out

    def _decode(self, data: bytes, out: list) -> None:
        self._buf += data
        while True:
            if self._need == 0:
                if len(self._buf) < _HEADER.size:
                    return
                self._need = _frame_length(bytes(self._buf[: _HEADER.size]))
                del self._buf[: _HEADER.size]
            if len(self._buf) < self._need:
                return
            body = bytes(self._buf[: self._need])
            del self._buf[: self._need]
            self._need = 0
            out.append(decode_body(body))

    @property
    def pending(self) -> bool:
        """True while part of a frame is buffered."""
        return bool(self._buf) or self._need != 0


def _recv_exact(sock: socket.socket, n: int, started: bool) -> bytes:
    chunks = []
    got = 0
    while got < n:
        try:
            chunk = sock.recv(min(n - got, 1 << 20))
        except socket.timeout:
            raise MessageTimeout("timed out waiting for a message", partial=started or got > 0) from None
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            continue
        except OSError as exc:
            raise ConnectionClosed("connection broken: %s" % exc) from None
        if not chunk:
            if not started and got == 0:
                raise ConnectionClosed("connection closed by peer")
            raise ProtocolError("connection closed in the middle of a frame")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_msg(sock: socket.socket) -> dict:
    """Read one message (blocking, honouring the socket's timeout)."""
    header = _recv_exact(sock, _HEADER.size, started=False)
    length = _frame_length(header)
    return decode_body(_recv_exact(sock, length, started=True))


def send_msg(sock: socket.socket, obj: dict) -> None:
    """Send one message (blocking, honouring the socket's timeout)."""
    data = encode_msg(obj)
    try:
        sock.sendall(data)
    except socket.timeout:
        raise ConnectionClosed("timed out sending a message") from None
    except OSError as exc:
        raise ConnectionClosed("connection broken: %s" % exc) from None


# ---------------------------------------------------------------------------------------------
# where the socket lives, and who may connect


def socket_dir(uid: int | None = None, root: str = "") -> str:
    """``/tmp/infertop-<uid>`` (below ``root``, e.g. ``/proc/PID/root``, when given)."""
    if uid is None:
        uid = os.geteuid()
    return "%s%s/infertop-%d" % (root, SOCKET_BASE, uid)


def socket_path(pid: int | None = None, uid: int | None = None, root: str = "") -> str:
    """``/tmp/infertop-<uid>/agent-<pid>.sock``: pid and uid as the agent sees them."""
    if pid is None:
        pid = os.getpid()
    return "%s/agent-%d.sock" % (socket_dir(uid, root), pid)


def check_socket_dir(path: str, uid: int) -> str | None:
    """Why ``path`` is not a safe socket directory for ``uid`` (None when it is)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "%s does not exist" % path
    except OSError as exc:
        return "cannot inspect %s: %s" % (path, exc.strerror or exc)
    if stat.S_ISLNK(st.st_mode):
        return "%s is a symbolic link" % path
    if not stat.S_ISDIR(st.st_mode):
        return "%s is not a directory" % path
    if st.st_uid != uid:
        return "%s is owned by uid %d, not %d" % (path, st.st_uid, uid)
    if st.st_mode & 0o077:
        return "%s has mode %03o; it must be 0700" % (path, stat.S_IMODE(st.st_mode))
    return None


def check_socket(path: str) -> str | None:
    """Why a client must not connect to the agent socket at ``path`` (None when it may): its
    directory must pass ``check_socket_dir`` for this user (for root: for the directory's
    owner), and the socket must be a socket of the directory's owner. Raises
    FileNotFoundError when there is no socket (no agent), OSError when it cannot be looked at."""
    directory = os.path.dirname(path) or "."
    owner = os.lstat(directory).st_uid
    st = os.lstat(path)
    me = os.geteuid()
    reason = check_socket_dir(directory, owner if me == 0 else me)
    if reason is not None:
        return reason
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != owner:
        return "%s is not a socket of its directory's owner" % path
    return None


def ensure_socket_dir(uid: int | None = None, gid: int | None = None, root: str = "") -> str:
    """Create (0700) or validate the socket directory; raise UnsafeSocketDir when it is unsafe.

    When the caller is root and ``uid`` is another user, the directory is created for that user.
    """
    if uid is None:
        uid = os.geteuid()
    path = socket_dir(uid, root)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UnsafeSocketDir("cannot create %s: %s" % (path, exc.strerror or exc)) from None
    else:
        try:
            os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask; make it exact
            if os.geteuid() != uid:
                os.chown(path, uid, -1 if gid is None else gid)
        except OSError as exc:
            raise UnsafeSocketDir("cannot set up %s: %s" % (path, exc.strerror or exc)) from None
    reason = check_socket_dir(path, uid)
    if reason is not None:
        raise UnsafeSocketDir(reason)
    return path


def peer_credentials(sock: socket.socket) -> tuple:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, getattr(socket, "SO_PEERCRED", 17), _PEERCRED.size)
    return _PEERCRED.unpack(raw)


def peer_uid(sock: socket.socket) -> int:
    """The uid of the peer of a connected Unix socket (``SO_PEERCRED``)."""
    return peer_credentials(sock)[1]


def peer_allowed(uid: int, own_uid: int | None = None) -> bool:
    """The agent talks only to its own user and to root."""
    if own_uid is None:
        own_uid = os.geteuid()
    return uid == own_uid or uid == 0


def _proc_status(pid: int) -> dict:
    out = {}
    with open("/proc/%d/status" % pid, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            out[key] = value.split()
    return out


def locate_socket(pid: int) -> str:
    """The socket path of an agent in process ``pid`` (a pid of this pid namespace).

    Looks through ``/proc/PID/root`` (so it works for targets in containers) and uses the pid
    and uid the target sees itself as (``NSpid``, effective ``Uid``). Raises OSError when the
    process cannot be inspected.
    """
    status = _proc_status(pid)
    uid = int(status["Uid"][1])
    nspid = status.get("NSpid") or [str(pid)]
    inner_pid = int(nspid[-1])
    root = "/proc/%d/root" % pid
    try:
        same_root = os.stat(root + "/").st_ino == os.stat("/").st_ino and os.stat(
            root + "/"
        ).st_dev == os.stat("/").st_dev
    except OSError:
        same_root = True
    return socket_path(inner_pid, uid, "" if same_root else root)


def connect(path: str, timeout: float = 2.0) -> socket.socket:
    """A connected client socket (raises OSError: FileNotFoundError, ConnectionRefusedError...)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def sweep_stale_sockets(directory: str) -> int:
    """Remove the sockets of agents whose process is gone (a target killed with SIGKILL cannot
    remove its own): ``agent-PID.sock`` with no ``/proc/PID`` and nobody listening. Returns how
    many were removed; never raises."""
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if not (name.startswith("agent-") and name.endswith(".sock")):
            continue
        pid = name[len("agent-") : -len(".sock")]
        path = os.path.join(directory, name)
        try:
            if not pid.isdigit() or os.path.exists("/proc/%s" % pid) or os.path.islink(path):
                continue
            if is_stale_socket(path):
                os.unlink(path)
                removed += 1
        except OSError:
            pass
    return removed


def is_stale_socket(path: str) -> bool:
    """True when ``path`` is a socket file nobody listens on any more."""
    try:
        sock = connect(path, timeout=0.5)
    except OSError as exc:
        return exc.errno in (errno.ECONNREFUSED, errno.ENOENT) and os.path.exists(path)
    sock.close()
    return False
