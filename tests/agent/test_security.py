"""Security rules of docs/security.md that the other agent tests do not already hold: the agent
executes nothing but its fixed commands, and a socket directory planted by someone else stops
an injection before anything is written. (Socket and directory modes, peer credentials and
refusing other users' processes: test_inject.py and test_protocol.py; the client's own check of
the directory: tests/collect/test_agent_client.py.)"""

from __future__ import annotations

import os
import pickle
import shutil
import struct
import subprocess
import tempfile

import pytest
from agenthelpers import ROOT, VENV_PY, Client, clean_env, wait_until

from infertop.agent import protocol as P
from infertop.agent.inject import inject

pytestmark = pytest.mark.slow
NOBODY = 65534


class _Touch:
    """Unpickling this runs a shell command: what a pickle-speaking agent would do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, ("touch %s" % self.path,))


def _raw_frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def test_the_agent_runs_nothing_but_its_commands(targets, tmp_path):
    target = targets(args=("--workers", "0", "--arm"))
    path = P.socket_path(target.pid, os.geteuid())
    assert wait_until(lambda: os.path.exists(path), 30)
    marker = tmp_path / "ran"
    code = "__import__('os').system('touch %s')" % marker
    client = Client(path)
    try:
        for msg in ({"cmd": code}, {"cmd": "configure", "window_s": code},
                    {"cmd": "configure", "stage_functions": code},
                    {"cmd": "hello", "client": {"__class__": code}}):  # fmt: skip
            reply = client.call(**msg)
            assert reply["type"] in ("error", "hello"), reply  # refused, or a plain hello
        assert client.call("configure")["config"]["window_s"] == 0.25  # nothing changed
    finally:
        client.close()
    # a pickle: not JSON, so one error and the connection closed; it is never unpickled
    sock = P.connect(path, timeout=10)
    try:
        sock.sendall(_raw_frame(pickle.dumps(_Touch(str(marker)))))
        reply = P.recv_msg(sock)
        assert reply["type"] == "error"
        with pytest.raises((P.ConnectionClosed, ConnectionResetError)):
            P.recv_msg(sock)
    finally:
        sock.close()
    assert not marker.exists()
    client = Client(path)  # and it still serves its user
    assert client.call("hello", client="t")["pid"] == target.pid
    client.close()
    out, err = target.stop()
    assert out == "" and err == ""


def _nobody_runs_python() -> bool:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return False
    r = subprocess.run(
        ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups", VENV_PY, "-c",
         "import sys; sys.path.insert(0, %r); import infertop.annotate" % str(ROOT)],
        capture_output=True, timeout=60,
    )  # fmt: skip
    return r.returncode == 0


def _plant(kind: str, where: str) -> None:
    if kind == "symlink":  # to a directory that would pass every other check
        real = tempfile.mkdtemp(prefix="infertop-decoy-")
        os.chown(real, NOBODY, NOBODY)
        os.symlink(real, where)
    elif kind == "foreign owner":
        os.mkdir(where, 0o700)  # root's, not the target user's
    else:  # "loose mode"
        os.mkdir(where)
        os.chmod(where, 0o777)
        os.chown(where, NOBODY, NOBODY)


@pytest.mark.solo  # plants /tmp/infertop-65534, which every test as user nobody uses
@pytest.mark.skipif(not _nobody_runs_python(), reason="needs root, setpriv, python for nobody")
@pytest.mark.parametrize("kind", ["symlink", "foreign owner", "loose mode"])
def test_a_planted_socket_directory_stops_the_injection(nobody_socket_dir_turn, targets, kind: str):
    """root injecting into user nobody's process: /tmp/infertop-65534 is a symlink, someone
    else's, or open to all. Nothing is written, nothing runs in the target, and it says why."""
    where = P.socket_dir(NOBODY)
    if os.path.lexists(where):
        pytest.skip("%s exists already (another run?)" % where)
    status_dir = tempfile.mkdtemp(prefix="infertop-test-")
    os.chmod(status_dir, 0o777)
    target = targets(
        "spans_target.py", python="setpriv", env=clean_env(PYTHONPATH=str(ROOT)),
        prefix=["--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups", VENV_PY],
        status_dir=status_dir,
    )  # fmt: skip
    _plant(kind, where)
    try:
        before = sorted(os.listdir(where))
        result = inject(target.pid, require_torch=False)
        assert not result.ok and result.kind == "denied", result
        assert "unsafe socket directory" in result.reason
        assert sorted(os.listdir(where)) == before  # no boot file, no socket
        assert target.proc.poll() is None
    finally:
        if os.path.islink(where):
            shutil.rmtree(os.path.realpath(where), ignore_errors=True)
            os.unlink(where)
        else:
            shutil.rmtree(where, ignore_errors=True)
        shutil.rmtree(status_dir, ignore_errors=True)
    out, err = target.stop()
    assert out == "" and err == ""


def test_boot_file_is_written_only_into_the_checked_directory(tmp_path):
    """The boot file goes into the socket directory as checked: a directory swapped for a link
    to elsewhere, or loosened, gets nothing written (root injecting for another user writes into
    a directory that user owns)."""
    import os

    from infertop.agent.inject.boot import write_boot_file

    real = tmp_path / "infertop-x"
    real.mkdir(mode=0o700)
    real.chmod(0o700)
    uid, gid = os.geteuid(), os.getegid()
    write_boot_file(str(real / "boot-1.py"), "pass\n", uid, gid)
    assert (real / "boot-1.py").read_text() == "pass\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    elsewhere.chmod(0o700)
    swapped = tmp_path / "infertop-y"
    swapped.symlink_to(elsewhere)
    with pytest.raises(OSError):
        write_boot_file(str(swapped / "boot-2.py"), "pass\n", uid, gid)
    assert list(elsewhere.iterdir()) == []
    real.chmod(0o755)
    with pytest.raises(OSError):
        write_boot_file(str(real / "boot-3.py"), "pass\n", uid, gid)
    assert not (real / "boot-3.py").exists()
