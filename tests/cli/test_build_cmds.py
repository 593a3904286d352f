from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from modelc.artifact import open_artifact, write_artifact
from modelc.artifact.tiny import make_model
from modelc.build.containerize import ENV_FLAGS
from modelc.build.zipapp import MODEL_MEMBER, member_span, parse_listen
from modelc.cli.main import main
from modelc.errors import ModelcError
from modelc.version import version_line

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MODELC_APP_CACHE", str(tmp_path / "appcache"))
    return tmp_path / "home"


@pytest.fixture
def src(tmp_path):
    return write_artifact(make_model(), tmp_path / "src.modelc")


def test_containerize_writes_expected_instructions(home, src, tmp_path, capsys):
    ctx = tmp_path / "ctx"
    assert main(["containerize", src, "-o", str(ctx), "--base-image", "python:3.12-slim"]) == 0
    docker = (ctx / "Dockerfile").read_text()
    lines = [line.split()[0] for line in docker.splitlines() if line and not line.startswith(("#", " "))]
    assert lines[0] == "FROM" and "FROM python:3.12-slim" in docker
    assert "RUN pip install /tmp/modelc-src" in docker and (ctx / "modelc-src" / "pyproject.toml").is_file()
    assert (ctx / "modelc-src" / "modelc" / "_build.py").is_file()
    assert "COPY model.modelc /models/model.modelc" in docker and "EXPOSE 8080" in docker
    assert 'ENTRYPOINT ["/usr/local/bin/modelc-entrypoint"]' in docker and "USER modelc" in docker
    assert "HEALTHCHECK" in docker and "/health" in docker
    assert (ctx / "model.modelc").read_bytes() == Path(src).read_bytes()
    assert stat.S_IMODE((ctx / "model.modelc").stat().st_mode) & 0o044 == 0o044  # readable by the image user
    assert "!model.modelc" in (ctx / ".dockerignore").read_text()
    entry = ctx / "entrypoint.sh"
    assert os.access(entry, os.X_OK)
    subprocess.run(["sh", "-n", str(entry)], check=True)
    # run the entrypoint with a fake `modelc` that prints its arguments
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "modelc").write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    (fake / "modelc").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "MODELC_PORT": "9000", "MODELC_MAX_CONCURRENT": "4",
           "MODELC_KV_CACHE_MB": "64", "MODELC_PROFILE": "1"}  # fmt: skip
    keyless = subprocess.run([str(entry)], env=env, capture_output=True, text=True)
    assert keyless.returncode == 1 and "MODELC_API_KEY" in keyless.stderr and not keyless.stdout  # refused
    env["MODELC_API_KEY"] = "k"
    argv = subprocess.run([str(entry), "--temperature", "0"], env=env, capture_output=True, text=True, check=True)
    assert argv.stdout.split("\n")[:-1] == [
        "run", "/models/model.modelc", "--bind", "0.0.0.0", "--port", "9000", "--temperature", "0",
        "--max-concurrent", "4", "--kv-cache-mb", "64", "--profile",
    ]  # fmt: skip
    assert set(ENV_FLAGS.values()) <= set(_run_flags())
    assert main(["containerize", src, "-o", str(ctx)]) == 1 and "not empty" in capsys.readouterr().err


def _run_flags() -> list[str]:
    """Every option `modelc run` accepts (so the entrypoint never passes an unknown flag)."""
    import typer.main

    from modelc.cli.main import build_app

    cmd = typer.main.get_command(build_app()).commands["run"]
    return [o for p in cmd.params for o in p.opts]


def test_containerize_with_pip_spec(home, src, tmp_path):
    assert main(["containerize", src, "-o", str(tmp_path / "c"), "--pip", "modelc==0.1.0"]) == 0
    docker = (tmp_path / "c" / "Dockerfile").read_text()
    assert "RUN pip install 'modelc==0.1.0'" in docker and not (tmp_path / "c" / "modelc-src").exists()


def test_parse_listen():
    assert parse_listen("0.0.0.0:9000", "127.0.0.1", 8080) == ("0.0.0.0", 9000)
    assert parse_listen("[::1]:81", "127.0.0.1", 8080) == ("::1", 81)
    assert parse_listen(None, "10.0.0.1", 81) == ("10.0.0.1", 81)
    for bad in ("nope", "1.2.3.4:", ":80", "a:b"):
        with pytest.raises(ModelcError, match="invalid --listen"):
            parse_listen(bad, "127.0.0.1", 8080)
    with pytest.raises(ModelcError, match="invalid port"):
        parse_listen(None, "127.0.0.1", 70000)


def test_compile_zipapp_maps_model_in_place(home, src, tmp_path, capsys):
    app = tmp_path / "app.pyz"
    assert main(["compile", src, "-o", str(app), "--listen", "127.0.0.1:9123", "--target", "pyz"]) == 0
    assert version_line() in capsys.readouterr().err
    assert app.read_bytes().startswith(b"#!/usr/bin/env python3\n") and os.access(app, os.X_OK)
    with zipfile.ZipFile(app) as zf:
        info = zf.getinfo(MODEL_MEMBER)
        assert info.compress_type == zipfile.ZIP_STORED and "__main__.py" in zf.namelist()
        assert "modelc/artifact/reader.py" in zf.namelist() and "modelc/_build.py" in zf.namelist()
    offset, length = member_span(app)
    assert offset % 64 == 0 and length == os.path.getsize(src)
    art = open_artifact(app, verify=True, offset=offset, length=length)
    assert art.name == "tiny" and bytes(art.tensors["model.norm.weight"].data) == bytes(
        make_model().tensors["model.norm.weight"].data
    )
    env = {**os.environ, "MODELC_APP_CACHE": str(tmp_path / "appcache")}
    proc = subprocess.run([sys.executable, str(app), "--check"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == version_line()
    assert proc.stdout.startswith(f"ok: tiny (llama, {len(make_model().tensors)} tensors) mapped at offset {offset}")
    proc = subprocess.run([sys.executable, str(app), "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "127.0.0.1:9123" in proc.stdout
    proc = subprocess.run([sys.executable, str(app), "--bogus"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "unexpected arguments --bogus" in proc.stderr


def test_compiled_app_names_missing_dependencies(home, src, tmp_path):
    app = tmp_path / "app.pyz"
    assert main(["compile", src, "-o", str(app), "--target", "pyz"]) == 0
    env = {**os.environ, "MODELC_APP_CACHE": str(tmp_path / "appcache")}
    # -S: no site-packages, so every third-party package is missing
    proc = subprocess.run([sys.executable, "-S", str(app)], capture_output=True, text=True, env=env, timeout=60)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and lines[0].startswith("modelc 0.1.0 (git ")
    assert lines[1].startswith("error: missing Python packages: numpy, numba") and len(lines) == 2


def test_compile_errors_are_one_line(home, tmp_path, capsys):
    junk = tmp_path / "junk.modelc"
    junk.write_bytes(b"nope" * 10)
    assert main(["compile", str(junk), "-o", str(tmp_path / "a.pyz")]) == 1
    assert "not a .modelc file" in capsys.readouterr().err and not (tmp_path / "a.pyz").exists()
    assert main(["compile", "missing-model", "-o", str(tmp_path / "a.pyz")]) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_compiled_app_serves(home, tmp_path):
    from modelc.models.tiny import make_tiny_llama

    art = write_artifact(make_tiny_llama(), tmp_path / "llama.modelc")
    app = tmp_path / "llama.pyz"
    port = _free_port()
    assert main(["compile", art, "-o", str(app), "--bind", "127.0.0.1", "--port", str(port), "--target", "pyz"]) == 0
    env = {**os.environ, "MODELC_APP_CACHE": str(tmp_path / "appcache")}
    proc = subprocess.Popen([sys.executable, str(app)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "compiled app did not come up"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json().get("status") == "ok":
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["tiny-llama"]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        proc.stderr.close()


def test_build_commands_have_help_with_example(capsys):
    for cmd in ("containerize", "compile"):
        assert main([cmd, "--help"]) == 0
        assert f"Example: modelc {cmd} " in " ".join(capsys.readouterr().out.split())
