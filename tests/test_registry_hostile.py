"""A hostile registry cannot write outside the store, send more than it declares, redirect the client
elsewhere, or get its bytes echoed (modelc/registry.py)."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from modelc import registry, store
from modelc.artifact.tiny import make_model
from modelc.artifact.writer import write_artifact
from tests.pull.fake_servers import QuietHTTPServer


class Scripted(BaseHTTPRequestHandler):
    """Answers each path from server.routes: path -> (status, headers, body)."""

    def do_GET(self) -> None:  # noqa: N802
        status, headers, body = self.server.routes.get(self.path, (404, {}, b"nope"))
        self.server.hits.append(self.path)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    srv = QuietHTTPServer(("127.0.0.1", 0), Scripted)
    srv.routes, srv.hits = {}, []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("MODELC_HOME", str(h))
    return h


def index(**version) -> bytes:
    v = {"version": 1, "size": 1000, "sha256": "a" * 64, "path": "m/m-v1.modelc", **version}
    return json.dumps({"models": [{"name": "m", "versions": [v]}]}).encode()


@pytest.mark.parametrize(
    "field,value",
    [
        ("sha256", "../../../../outside"),
        ("sha256", "A" * 64 + "/x"),
        ("path", "../../etc/passwd"),
        ("path", "/etc/passwd"),
        ("path", "http://169.254.169.254/latest"),
        ("size", -1),
        ("version", "1; rm"),
    ],
)
def test_index_fields_checked_before_use(home, tmp_path, server, field, value) -> None:
    srv, url = server
    srv.routes["/index.json"] = (200, {}, index(**{field: value}))
    with pytest.raises(registry.RegistryError, match=r"malformed models\[0\]") as e:
        registry.pull("m", loc=url)
    assert str(value) not in e.value.message  # the index's bytes are not echoed
    assert srv.hits == ["/index.json"]  # nothing else was fetched
    assert not (tmp_path / "outside").exists() and not (home / "downloads").exists()


def test_bad_name_in_index(home, server) -> None:
    srv, url = server
    srv.routes["/index.json"] = (200, {}, json.dumps({"models": [{"name": "../../x", "versions": []}]}).encode())
    with pytest.raises(registry.RegistryError, match="malformed"):
        registry.pull("m", loc=url)


def test_download_capped_at_declared_size(home, server) -> None:
    srv, url = server
    huge = b"\0" * 300_000
    srv.routes["/index.json"] = (200, {}, index(size=1000, sha256=hashlib.sha256(huge).hexdigest()))
    srv.routes["/m/m-v1.modelc"] = (200, {}, huge)
    with pytest.raises(registry.RegistryError, match="more than the 1000 bytes"):
        registry.pull("m", loc=url, retries=0)
    left = list((home / "downloads").iterdir()) if (home / "downloads").exists() else []
    assert left == [] and not store.exists("m")


def test_local_registry_capped_too(home, tmp_path) -> None:
    reg = tmp_path / "reg"
    (reg / "m").mkdir(parents=True)
    (reg / "m" / "m-v1.modelc").write_bytes(b"\0" * 50_000)
    (reg / "index.json").write_bytes(index(size=10))
    with pytest.raises(registry.RegistryError, match="larger than its index declares"):
        registry.pull("m", loc=str(reg), retries=0)
    assert not list((home / "downloads").iterdir())


def test_redirects_stay_within_the_registry(home, tmp_path, server) -> None:
    srv, url = server
    art = tmp_path / "a.modelc"
    write_artifact(make_model(name="m"), art)
    data = art.read_bytes()
    srv.routes["/index.json"] = (200, {}, index(size=len(data), sha256=hashlib.sha256(data).hexdigest()))
    srv.routes["/m/m-v1.modelc"] = (302, {"Location": "/blobs/1"}, b"")
    srv.routes["/blobs/1"] = (200, {}, data)
    assert registry.pull("m", loc=url).read_bytes() == data  # same origin: followed
    srv.routes["/index.json"] = (302, {"Location": "http://127.0.0.2:1/index.json"}, b"")
    with pytest.raises(registry.RegistryError, match="redirected outside"):
        registry.load_index(url)


def test_index_error_does_not_echo_the_body(home, server) -> None:
    srv, url = server
    srv.routes["/index.json"] = (200, {}, b"SECRET-INTERNAL-PAGE <html>")
    with pytest.raises(registry.RegistryError) as e:
        registry.load_index(url)
    assert "SECRET" not in e.value.message
