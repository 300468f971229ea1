"""The wire format and socket rules of docs/agent-protocol.md (infertop/agent/protocol.py)."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infertop.agent import protocol as P


def pair(timeout: float = 1.0) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.settimeout(timeout)
    b.settimeout(timeout)
    return a, b


def test_round_trip_adds_version():
    a, b = pair()
    with a, b:
        P.send_msg(a, {"cmd": "hello", "client": "t", "text": "héllo ✓"})
        msg = P.recv_msg(b)
    assert msg == {"cmd": "hello", "client": "t", "text": "héllo ✓", "v": 1}


def test_frame_layout_is_big_endian_length_then_utf8_json():
    frame = P.encode_msg({"type": "ok"})
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    assert json.loads(frame[4:].decode("utf-8")) == {"type": "ok", "v": 1}


def test_encode_refuses_non_objects_nan_and_oversize(monkeypatch):
    with pytest.raises(P.ProtocolError):
        P.encode_msg([1, 2])  # type: ignore[arg-type]
    with pytest.raises(P.ProtocolError):
        P.encode_msg({"x": float("nan")})
    monkeypatch.setattr(P, "MAX_FRAME", 100)
    with pytest.raises(P.ProtocolError):
        P.encode_msg({"x": "y" * 200})


@pytest.mark.parametrize(
    "body",
    [
        b"[1, 2]",
        b'"text"',
        b"17",
        b"null",
        b"{",
        b"\xff\xfe{}",
        b'{"v": 2, "cmd": "hello"}',
        b'{"cmd": "hello"}',
        b'{"v": 1, "x": NaN}',
        b"[" * 100000 + b"]" * 100000,
    ],
)
def test_garbage_bodies_are_protocol_errors(body):
    a, b = pair()
    with a, b:
        a.sendall(struct.pack(">I", len(body)) + body)
        with pytest.raises(P.ProtocolError) as info:
            P.recv_msg(b)
    assert not isinstance(info.value, P.ConnectionClosed)


def test_limits_and_closing():
    a, b = pair()
    with a, b:
        a.sendall(struct.pack(">I", P.MAX_FRAME + 1))
        with pytest.raises(P.ProtocolError, match="limit"):
            P.recv_msg(b)
    a, b = pair()
    with a, b:
        a.sendall(struct.pack(">I", 0))
        with pytest.raises(P.ProtocolError, match="empty"):
            P.recv_msg(b)
    a, b = pair()
    with b:
        a.close()
        with pytest.raises(P.ConnectionClosed):
            P.recv_msg(b)
    a, b = pair()
    with b:
        a.sendall(struct.pack(">I", 10) + b'{"v"')
        a.close()
        with pytest.raises(P.ProtocolError, match="middle"):
            P.recv_msg(b)


def test_timeouts_say_whether_the_stream_is_intact():
    a, b = pair(timeout=0.05)
    with a, b:
        with pytest.raises(P.MessageTimeout) as info:
            P.recv_msg(b)
        assert info.value.partial is False
        a.sendall(struct.pack(">I", 50) + b"{")
        with pytest.raises(P.MessageTimeout) as info:
            P.recv_msg(b)
        assert info.value.partial is True


def test_frame_decoder_handles_any_split():
    frames = b"".join(P.encode_msg({"type": "spans", "i": i}) for i in range(5))
    for step in (1, 3, 7, len(frames)):
        dec = P.FrameDecoder()
        got = []
        for i in range(0, len(frames), step):
            got += dec.feed(frames[i : i + step])
        assert [m["i"] for m in got] == list(range(5))
        assert not dec.pending


def test_frame_decoder_keeps_the_messages_before_a_bad_frame():
    good = P.encode_msg({"type": "status", "n": 1})
    for bad in (struct.pack(">I", P.MAX_FRAME + 1), struct.pack(">I", 2) + b"[]"):
        with pytest.raises(P.ProtocolError) as info:
            P.FrameDecoder().feed(good + good + bad + good)
        assert [m["n"] for m in info.value.before] == [1, 1]
    dec = P.FrameDecoder()
    assert dec.feed(struct.pack(">I", P.MAX_FRAME)) == [] and dec.pending  # at the limit: waits


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_fuzz_random_bytes_only_protocol_errors(data):
    """Random bytes on the wire: recv_msg returns a message or raises ProtocolError, never
    anything else and never hangs (the writer closes; timeouts bound every read)."""
    a, b = pair(timeout=0.5)
    with b:
        a.sendall(data)
        a.close()
        for _ in range(len(data) + 2):
            try:
                msg = P.recv_msg(b)
            except P.ProtocolError:
                break
            assert isinstance(msg, dict) and msg["v"] == 1
    dec = P.FrameDecoder()
    try:
        for m in dec.feed(data):
            assert isinstance(m, dict)
    except P.ProtocolError:
        pass


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values, st.integers(min_value=0, max_value=64))
def test_fuzz_json_values_and_truncation(value, cut):
    body = json.dumps(value).encode()
    a, b = pair(timeout=0.5)
    with b:
        frame = struct.pack(">I", len(body)) + body
        a.sendall(frame[: max(0, len(frame) - cut)])
        a.close()
        try:
            msg = P.recv_msg(b)
        except P.ProtocolError:
            return
        assert cut == 0 and isinstance(value, dict) and value.get("v") == 1 and msg == value


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.binary(max_size=64))
def test_fuzz_lengths(length, rest):
    a, b = pair(timeout=0.3)
    with b:
        a.sendall(struct.pack(">I", length) + rest)
        a.close()
        with pytest.raises(P.ProtocolError):
            P.recv_msg(b)


def test_big_message_round_trip_in_a_thread():
    a, b = pair(timeout=5.0)
    payload = {"type": "window", "paths": [[["aten::mm"] * 5, "forward", "cpu", 1, 1.0, 1.0, None]] * 20000}
    with a, b:
        t = threading.Thread(target=P.send_msg, args=(a, payload))
        t.start()
        msg = P.recv_msg(b)
        t.join()
    assert len(msg["paths"]) == 20000


# ---------------------------------------------------------------------------------------------
# where the socket lives, and who may connect


def test_socket_path_rules():
    assert P.socket_dir(1000) == "/tmp/infertop-1000"
    assert P.socket_path(42, 1000) == "/tmp/infertop-1000/agent-42.sock"
    assert P.socket_path(42, 1000, root="/proc/9/root") == "/proc/9/root/tmp/infertop-1000/agent-42.sock"
    assert P.locate_socket(os.getpid()) == P.socket_path(os.getpid(), os.geteuid())


def test_check_socket_dir(tmp_path):
    uid = os.geteuid()
    good = tmp_path / "good"
    good.mkdir(mode=0o700)
    os.chmod(good, 0o700)
    assert P.check_socket_dir(str(good), uid) is None
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o755)
    assert "0700" in P.check_socket_dir(str(loose), uid)
    group = tmp_path / "group"
    group.mkdir()
    os.chmod(group, 0o770)
    assert P.check_socket_dir(str(group), uid) is not None
    link = tmp_path / "link"
    link.symlink_to(good)
    assert "symbolic link" in P.check_socket_dir(str(link), uid)
    afile = tmp_path / "file"
    afile.write_text("")
    assert "not a directory" in P.check_socket_dir(str(afile), uid)
    assert "owned by" in P.check_socket_dir(str(good), uid + 1)
    assert "does not exist" in P.check_socket_dir(str(tmp_path / "nope"), uid)


def test_check_socket_a_client_connects_to(tmp_path):
    home = tmp_path / "infertop-x"
    home.mkdir(mode=0o700)
    os.chmod(home, 0o700)
    path = str(home / "agent-1.sock")
    with pytest.raises(FileNotFoundError):
        P.check_socket(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        assert P.check_socket(path) is None
        os.chmod(home, 0o755)
        assert "0700" in P.check_socket(path)
    os.chmod(home, 0o700)
    (home / "plain").write_text("")
    assert "not a socket" in P.check_socket(str(home / "plain"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_ensure_socket_dir_refuses_foreign_or_loose_dirs(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "SOCKET_BASE", str(tmp_path))
    path = P.ensure_socket_dir(0)
    assert path == str(tmp_path / "infertop-0")
    assert (os.stat(path).st_mode & 0o777) == 0o700
    assert P.ensure_socket_dir(0) == path  # an existing good one is fine
    os.chmod(path, 0o755)
    with pytest.raises(P.UnsafeSocketDir, match="0700"):
        P.ensure_socket_dir(0)
    os.chmod(path, 0o700)
    os.chown(path, 65534, -1)
    with pytest.raises(P.UnsafeSocketDir, match="owned by uid 65534"):
        P.ensure_socket_dir(0)
    # root creates a user's directory for that user
    other = P.ensure_socket_dir(65534, 65534)
    st_ = os.stat(other)
    assert (st_.st_uid, st_.st_mode & 0o777) == (65534, 0o700)


def test_peer_uid_via_socketpair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert P.peer_uid(a) == os.geteuid()
        pid, uid, gid = P.peer_credentials(b)
        assert (pid, uid, gid) == (os.getpid(), os.geteuid(), os.getegid())


def test_peer_allowed():
    assert P.peer_allowed(1000, 1000)
    assert P.peer_allowed(0, 1000)
    assert not P.peer_allowed(1001, 1000)
    assert not P.peer_allowed(65534, 0)
