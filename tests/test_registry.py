from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest

from modelc import registry, store
from modelc.artifact import open_artifact, write_artifact
from modelc.artifact.tiny import make_model
from modelc.build.static_server import parse_range
from modelc.cli.main import main
from modelc.errors import ChecksumError, NotFoundError
from tests.pull.fake_servers import QuietHTTPServer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MODELC_REGISTRY", raising=False)
    return tmp_path / "home"


@pytest.fixture
def reg_dir(tmp_path):
    """A registry folder: user/tiny v1 and v2 (llama), other/gpt v1 (gpt2)."""
    folder = tmp_path / "reg"
    for seed, name, arch in ((1, "user/tiny", "llama"), (2, "user/tiny", "llama"), (3, "other/gpt", "gpt2")):
        model = make_model(seed, name=f"{name}-{seed}")
        model.architecture = arch
        registry.add(folder, write_artifact(model, tmp_path / f"a{seed}.modelc"), name=name)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(reg_dir):
    port = free_port()
    cmd = [sys.executable, "-m", "modelc", "registry", "serve", str(reg_dir), "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/index.json", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "registry server did not start"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_serve_pull_and_search(home, served):
    path = registry.pull("user/tiny", loc=served)
    assert open_artifact(path, verify=True).name == "user/tiny-2"
    assert registry.pull("user/tiny:1", loc=served) == path
    assert open_artifact(store.resolve("user/tiny")).name == "user/tiny-1"
    assert store.versions("user/tiny") == [1] and store.active_version("user/tiny") == 2
    assert [m.name for m in registry.search("", loc=served)] == ["other/gpt", "user/tiny"]
    assert [(m.name, m.version) for m in registry.search("TINY", loc=served)] == [("user/tiny", 2)]
    assert [m.name for m in registry.search("", arch="gpt2", loc=served)] == ["other/gpt"]
    assert [m.name for m in registry.search("GPT2", loc=served)] == ["other/gpt"]  # architectures match too
    assert not list((home / "downloads").iterdir())
    with pytest.raises(NotFoundError, match="no version 7"):
        registry.pull("user/tiny:7", loc=served)
    r = httpx.get(served + "/user/tiny/tiny-v1.modelc", headers={"Range": "bytes=8-11"})
    assert r.status_code == 206 and r.content == b"\x01\x00\x00\x00"
    assert httpx.get(served + "/../etc/passwd").status_code == 404


def test_static_server_range_parsing():
    assert parse_range("bytes=0-9", 100) == (0, 9)
    assert parse_range("bytes=90-", 100) == (90, 99)
    assert parse_range("bytes=-10", 100) == (90, 99)
    assert parse_range("bytes=95-200", 100) == (95, 99)
    assert parse_range("bytes=100-", 100) is None and parse_range("bytes=5-1", 100) is None
    assert parse_range("bytes=0-1,5-6", 100) is None and parse_range("items=0-1", 100) is None


class Flaky(BaseHTTPRequestHandler):
    """Serves one folder; the first `drops` GETs of a .modelc are cut after `cut` bytes."""

    def do_GET(self) -> None:  # noqa: N802
        srv = self.server
        data = (srv.root / self.path.lstrip("/")).read_bytes()
        start = 0
        rng = self.headers.get("Range")
        srv.ranges.append(rng)
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(data) - start))
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        body = data[start:]
        if self.path.endswith(".modelc") and srv.drops > 0:
            srv.drops -= 1
            self.wfile.write(body[: srv.cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def flaky(reg_dir):
    srv = QuietHTTPServer(("127.0.0.1", 0), Flaky)
    srv.root, srv.ranges, srv.drops, srv.cut = reg_dir, [], 0, 5000
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_interrupted_pull_resumes_with_range(home, flaky):
    srv, url = flaky
    srv.drops = 2
    path = registry.pull("user/tiny", loc=url, backoff_s=0.01)
    assert open_artifact(path, verify=True).name == "user/tiny-2"
    modelc_ranges = srv.ranges[1:]  # [0] is index.json
    assert modelc_ranges == [None, "bytes=5000-", "bytes=10000-"]


def test_pull_resumes_across_invocations(home, flaky):
    srv, url = flaky
    srv.drops = 1
    with pytest.raises(registry.RegistryError, match="failed after 1 tries"):
        registry.pull("user/tiny", loc=url, retries=0)
    assert not store.exists("user/tiny")
    parts = list((home / "downloads").iterdir())
    assert len(parts) == 1 and parts[0].stat().st_size == 5000
    registry.pull("user/tiny", loc=url, retries=0)
    assert srv.ranges[-1] == "bytes=5000-" and store.exists("user/tiny")


def test_corrupt_download_rejected_store_unchanged(home, reg_dir, served):
    registry.pull("user/tiny:1", loc=served)
    before = sorted(p.name for p in (home / "models" / "user").iterdir())
    target = reg_dir / "user" / "tiny" / "tiny-v2.modelc"
    raw = bytearray(target.read_bytes())
    raw[-1] ^= 0xFF
    target.write_bytes(bytes(raw))
    with pytest.raises(ChecksumError, match="does not match"):
        registry.pull("user/tiny", loc=served)
    assert sorted(p.name for p in (home / "models" / "user").iterdir()) == before
    assert open_artifact(store.resolve("user/tiny")).name == "user/tiny-1"
    assert not list((home / "downloads").iterdir())


def test_local_folder_registry_and_env(home, reg_dir, monkeypatch):
    monkeypatch.setenv("MODELC_REGISTRY", str(reg_dir))
    path = registry.pull("other/gpt")
    assert open_artifact(path).architecture == "gpt2"
    assert registry.pull("other/gpt") == path and store.versions("other/gpt") == []  # up to date: no new version
    index = json.loads((reg_dir / "index.json").read_text())
    assert [v["version"] for v in index["models"][0]["versions"]] == [1, 2]


def test_no_registry_is_one_line(home, capsys):
    assert main(["pull", "user/tiny"]) == 1
    err = capsys.readouterr().err
    assert err == "error: no registry configured: pass --registry URL|DIR or set MODELC_REGISTRY\n"
    assert main(["search", "x"]) == 1


def test_cli_search_and_pull(home, reg_dir, capsys):
    assert main(["search", "gpt", "--registry", str(reg_dir)]) == 0
    assert "other/gpt" in capsys.readouterr().out
    assert main(["pull", "user/tiny", "--version", "1", "--registry", str(reg_dir)]) == 0
    assert os.path.exists(store.active_path("user/tiny"))


def test_registry_commands_have_help_with_example(capsys):
    for argv in (["pull", "--help"], ["search", "--help"], ["registry", "--help"], ["registry", "add", "--help"],
                 ["registry", "serve", "--help"]):  # fmt: skip
        assert main(argv) == 0
        assert "Example: modelc " in " ".join(capsys.readouterr().out.split())
