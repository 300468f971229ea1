"""The socket folder /tmp/infertop-UID is shared by every agent and injector of a user, and
each removes it on its way out when it is empty. Two sessions on one host (or two tests side
by side) race: one may remove it between another's making sure of it and its write or bind.
Measured under load: "cannot write /tmp/infertop-0/boot-….py: No such file or directory".
Both sides now make sure of the folder again."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

from infertop.agent.inject import boot
from infertop.agent.payload import serve


class _Server(serve._ServingMixin):
    def __init__(self) -> None:
        self._init_serving()


def test_the_agent_binds_even_when_the_folder_vanishes_once(monkeypatch) -> None:
    short = Path(tempfile.mkdtemp(prefix="ift-", dir="/tmp"))  # a socket path has 107 bytes
    folder = short / "infertop-0"
    calls = []

    def ensure(uid=None, gid=None, root=""):
        calls.append(uid)
        folder.mkdir(mode=0o700, exist_ok=True)
        if len(calls) == 1:  # another agent's detach removes it right after we made sure
            os.rmdir(folder)
        return str(folder)

    monkeypatch.setattr(serve, "ensure_socket_dir", ensure)
    monkeypatch.setattr(serve, "socket_path", lambda pid, uid=None: str(folder / f"agent-{pid}.sock"))
    server = _Server()
    server.open()
    try:
        assert len(calls) == 2 and server.path is not None and os.path.exists(server.path)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(server.path)  # listening
        client.close()
    finally:
        server.listener.close()
        shutil.rmtree(short)


def test_the_boot_file_write_says_enoent_so_the_injector_can_retry(tmp_path) -> None:
    gone = tmp_path / "infertop-0"
    try:
        boot.write_boot_file(str(gone / "boot-1-x.py"), "pass\n", os.geteuid(), os.getegid())
    except FileNotFoundError:
        pass  # what orchestrate.inject retries on, after making sure of the folder again
    else:
        raise AssertionError("a write into a missing folder must fail with FileNotFoundError")
