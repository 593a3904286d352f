"""modelc compile --target: a PyInstaller onefile executable with the model appended and mapped in place.

The build takes minutes, so the end-to-end test is slow: it compiles the tiny llama, then runs the file
under `env -i` (no PATH, no venv, no PYTHONPATH) and asks it for a completion over HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import httpx
import pytest

from modelc.artifact import write_artifact
from modelc.build.exe import host_target, read_trailer
from modelc.cli.main import main
from tests.server.tiny_model import make_served_model


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_other_targets_are_refused_in_one_line(home, tmp_path, capsys):
    art = write_artifact(make_served_model(), tmp_path / "m.modelc")
    assert main(["compile", str(art), "-o", str(tmp_path / "app"), "--target", "windows-arm64"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --target windows-arm64 is not supported here") and host_target() in err[-1]
    assert not (tmp_path / "app").exists()


def test_a_file_without_the_trailer_is_not_an_executable(tmp_path):
    from modelc.build.containerize import BuildError

    p = tmp_path / "x"
    p.write_bytes(b"\0" * 100)
    with pytest.raises(BuildError, match="not a modelc executable"):
        read_trailer(p)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_compiled_executable_serves_under_env_i(home, tmp_path, capsys):
    pytest.importorskip("PyInstaller")
    art = write_artifact(make_served_model(), tmp_path / "m.modelc")
    app = tmp_path / "tiny-app"
    port = _free_port()
    assert main(["compile", str(art), "-o", str(app), "--listen", f"127.0.0.1:{port}"]) == 0
    offset, length, config = read_trailer(app)
    assert offset % 64 == 0 and length == os.path.getsize(art) and config["port"] == port
    with open(app, "rb") as f, open(art, "rb") as m:
        f.seek(offset)
        assert f.read(length) == m.read()  # the model is stored as is, to be mapped in place
    env = {"MODELC_APP_CACHE": str(tmp_path / "cache")}  # nothing else: no PATH, no Python, no venv
    out = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), str(app), "--check"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0 and "ok: tiny-llama" in out.stdout, out.stderr[-2000:]
    proc = subprocess.Popen(["env", "-i", *(f"{k}={v}" for k, v in env.items()), str(app)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 900
        while True:
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "the executable did not become ready"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "abc", "max_tokens": 4}, timeout=120)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1, r.text
        maps = [line.split() for line in open(f"/proc/{_child_pid(proc.pid)}/maps") if line.rstrip().endswith(str(app))]
        model_maps = [m for m in maps if m[1] == "r--s" and int(m[2], 16) <= offset < int(m[2], 16) + (1 << 30)]
        assert model_maps, maps  # the model: a read-only shared map of the executable itself, at its offset
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert config["host"] == "127.0.0.1"


def _child_pid(pid: int) -> int:
    """The PyInstaller onefile bootloader runs the app in a child process: its pid (else pid itself)."""
    try:
        children = open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        return pid
    return _child_pid(int(children[0])) if children else pid
