"""Armed agents: ``infertop.agent.arm()``, ``INFERTOP_AGENT=1`` through the .pth hook, and the
payload running self-contained (no infertop installed) on every supported Python."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from agenthelpers import (
    ROOT,
    TARGETS,
    VENV_PY,
    Client,
    clean_env,
    pyenv_python,
    threads,
    wait_until,
)

from infertop.agent import protocol as P
from infertop.agent.inject import inject
from infertop.agent.payload import payload_source

PTH = ROOT / "infertop" / "agent" / "infertop-agent.pth"


def window_cycle(path: str) -> dict:
    client = Client(path)
    try:
        hello = client.call("hello", client="test")
        client.call("configure", window_s=0.2, period_s=1.0)
        client.call("start")
        # generous: the first profiler window of a cold process (Kineto starting) can take long
        window = client.wait_for("window", timeout=60, predicate=lambda m: m["events"] > 0)
        assert any(p[0][-1].startswith("aten::") for p in window["paths"])
        client.call("detach")
    finally:
        client.close()
    return hello


@pytest.mark.slow
def test_arm_keeps_listening_across_clients(targets):
    target = targets(args=("--workers", "1", "--arm", "--size", "256"))
    path = P.socket_path(target.pid, os.geteuid())
    assert wait_until(lambda: os.path.exists(path), 10)
    result = inject(target.pid)
    assert result.ok and result.method == "armed" and result.socket_path == path
    busy = Client(path)
    busy.call("hello", client="first")
    result = inject(target.pid)  # a second infertop while the first is attached
    assert not result.ok and result.kind == "busy" and "another client" in result.reason
    busy.close()
    hello = window_cycle(path)
    assert hello["armed"] is True and hello["torch"] and hello["all_threads"] is True
    time.sleep(0.5)
    assert os.path.exists(path)  # still there for the next client
    agent_tid = hello["agent_tid"]
    assert agent_tid in threads(target.pid)
    hello2 = window_cycle(path)
    assert hello2["agent_tid"] == agent_tid
    out, err = target.stop()
    assert target.proc.returncode == 0 and out == "" and err == ""
    assert not os.path.exists(path)  # removed at exit


def pth_runner(tmp_path: Path) -> list[str]:
    """``python -c`` that processes infertop-agent.pth as site.py does at start-up (the dev venv
    cannot hold the .pth until pyproject installs it), then runs the target script."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    shutil.copy(PTH, site_dir / PTH.name)
    code = (
        "import site, sys, runpy; site.addsitedir(%r); "
        "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    ) % str(site_dir)
    return [VENV_PY, "-c", code]


def start_with_pth(tmp_path: Path, env: dict) -> tuple[subprocess.Popen, str]:
    status = str(tmp_path / "status.json")
    proc = subprocess.Popen(
        [*pth_runner(tmp_path), str(TARGETS / "torch_loop.py"), "--counter", status, "--workers", "1",
         "--size", "256"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert wait_until(lambda: os.path.exists(status) or proc.poll() is not None, 60)
    assert proc.poll() is None, proc.communicate()
    return proc, status


@pytest.mark.slow
def test_env_var_arms_at_startup_before_torch(tmp_path):
    """INFERTOP_AGENT=1: armed by the .pth line at interpreter start, before the program imports
    torch; windows start once torch is there, libkineto first starts on the agent's thread."""
    proc, _status = start_with_pth(tmp_path, clean_env(INFERTOP_AGENT="1"))
    try:
        path = P.socket_path(proc.pid, os.geteuid())
        assert wait_until(lambda: os.path.exists(path), 10)
        hello = window_cycle(path)
        assert hello["armed"] is True and hello["torch"]
        assert os.path.exists(path)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert out == "" and err == "", err


@pytest.mark.slow
def test_pth_does_nothing_without_the_env_var(tmp_path):
    code = (
        "import site, sys, threading, json; site.addsitedir(%r); "
        "print(json.dumps([threading.active_count(), sorted(m for m in sys.modules if m.startswith('infertop'))]))"
    )
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    shutil.copy(PTH, site_dir / PTH.name)
    r = subprocess.run([VENV_PY, "-c", code % str(site_dir)], capture_output=True, text=True,
                       env=clean_env(), timeout=60)  # fmt: skip
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads(r.stdout) == [1, []]


def test_autoarm_module_directly(tmp_path):
    """The hook module itself, as the brief allows when the .pth cannot be installed."""
    code = (
        "import os, sys, threading, json\n"
        "import infertop.agent._autoarm\n"
        "from infertop.agent import armed_agent\n"
        "a = armed_agent()\n"
        "print(json.dumps([a is not None, a.path if a else None, a.mode if a else None,"
        " [t.name for t in threading.enumerate()], 'torch' in sys.modules]))\n"
    )
    r = subprocess.run([VENV_PY, "-c", code], capture_output=True, text=True,
                       env=clean_env(INFERTOP_AGENT="1"), timeout=60)  # fmt: skip
    assert r.returncode == 0 and r.stderr == "", r.stderr
    armed, path, mode, names, torch_loaded = json.loads(r.stdout)
    assert armed and mode == "armed" and path.endswith(".sock") and "infertop-agent" in names
    assert not torch_loaded  # arming never imports torch
    assert not os.path.exists(path)  # the agent removed its socket at exit
    r = subprocess.run([VENV_PY, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert json.loads(r.stdout)[0] is False


SELF_CONTAINED = r"""
import json, sys, threading
src = open(sys.argv[1]).read()
ns = {"__name__": "_infertop_agent"}
exec(compile(src, "<infertop-agent>", "exec"), ns)
exec(compile(src, "<infertop-agent>", "exec"), {"__name__": "_infertop_agent"})  # a second run
agents = [t for t in threading.enumerate() if t.name == "infertop-agent"]
agent = sys.modules["_infertop_agent"].agent
sock = ns["connect"](agent.path)
ns["send_msg"](sock, {"cmd": "hello", "client": "t"})
hello = ns["recv_msg"](sock)
ns["send_msg"](sock, {"cmd": "bogus"})
err = ns["recv_msg"](sock)
sock.sendall(b"\x00\x00\x00\x05[1,2]")
err2 = ns["recv_msg"](sock)
print(json.dumps([len(agents), hello, err, err2, "infertop" in sys.modules]))
"""


@pytest.mark.parametrize("version", ["3.8", "3.9", "3.10", "3.11", "3.12", "3.13"])
def test_payload_is_self_contained_on_every_python(tmp_path, version):
    exe = VENV_PY if version == "3.11" else pyenv_python(version)
    if exe is None:
        pytest.skip("no Python %s here" % version)
    src = tmp_path / "payload.py"
    src.write_text(payload_source(mode="armed"))
    script = tmp_path / "run.py"
    script.write_text(SELF_CONTAINED)
    r = subprocess.run([exe, "-I", str(script), str(src)], capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    n_agents, hello, err, err2, infertop_imported = json.loads(r.stdout)
    assert n_agents == 1  # running the source twice starts one agent
    assert hello["type"] == "hello" and hello["python"].startswith(version + ".") and hello["armed"] is True
    assert hello["torch"] is None and hello["monitoring"] is (tuple(map(int, version.split("."))) >= (3, 12))
    assert err["type"] == "error" and "unknown command" in err["message"]
    assert err2["type"] == "error" and "protocol error" in err2["message"]
    assert not infertop_imported


def test_forked_child_of_an_armed_process_is_not_armed(tmp_path):
    code = r"""
import json, os, sys, threading
from infertop.agent import arm, armed_agent
path = arm()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    info = [armed_agent() is None, [t.name for t in threading.enumerate()], os.path.exists(path)]
    os.write(w, json.dumps(info).encode())
    os._exit(0)
os.waitpid(pid, 0)
child = json.loads(os.read(r, 4096))
print(json.dumps([child, armed_agent() is not None, os.path.exists(path)]))
"""
    r = subprocess.run([VENV_PY, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    (child_unarmed, child_threads, path_seen_by_child), parent_armed, path_exists = json.loads(r.stdout)
    assert child_unarmed and "infertop-agent" not in child_threads
    assert path_seen_by_child and parent_armed and path_exists  # the parent's socket is untouched


@pytest.mark.slow
def test_installed_package_puts_the_pth_in_site_packages(tmp_path):
    """A regular install (a wheel) places the .pth at the top of site-packages, where the
    interpreter reads it at start; without that, INFERTOP_AGENT=1 would arm nothing."""
    import zipfile

    r = subprocess.run(
        [VENV_PY, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("infertop-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read(PTH.name) == PTH.read_bytes()
