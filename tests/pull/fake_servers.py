"""Local HTTP servers on 127.0.0.1 that answer the endpoints modelc's pulls call, as the real services do.

- FakeHub: the Hugging Face Hub endpoints huggingface_hub calls (read from its source:
  HfApi.model_info -> GET /api/models/{repo}/revision/{rev}?blobs=true; get_hf_file_metadata ->
  HEAD /{repo}/resolve/{rev}/{file} with X-Repo-Commit, X-Linked-Etag, X-Linked-Size and, for LFS
  files, a 302 to a blob store on another origin; list_models -> GET /api/models), plus the errors the
  library turns into exceptions (X-Error-Code: RepoNotFound, GatedRepo, EntryNotFound).
- BlobStore: the CDN the Hub redirects LFS files to: GET /blobs/{sha256} with Range; faults on demand
  (drop the connection part-way once, send wrong bytes, send more than declared, ignore Range).
- FakeOllama: the Ollama registry's v2 API: GET /v2/{ns}/{name}/manifests/{tag} and
  /v2/{ns}/{name}/blobs/sha256:{hex} (307 to the blob store).
- FakeIndex: a PyPI simple index (PEP 691 JSON) with wheel files.
Each runs in a thread of the test process and is stopped by the test that started it (shutdown()).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

LFS_MIN_BYTES = 1024  # files this large are LFS files (sha256 oid, redirect to the blob store)


class QuietHTTPServer(ThreadingHTTPServer):
    """A test server that does not print a traceback when a client drops its connection (the fault tests do so
    on purpose, and a client that gives up on a retry resets the socket)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


@dataclass
class Faults:
    """What the blob store does wrong, per sha256 (each fault fires once unless `always`)."""

    drop_after: dict[str, int] = field(default_factory=dict)  # close the connection after N body bytes
    corrupt: set[str] = field(default_factory=set)  # flip one byte of the body
    extra: dict[str, int] = field(default_factory=dict)  # append N bytes past the declared size
    ignore_range: set[str] = field(default_factory=set)
    always: bool = False
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)


class _Server:
    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                owner.handle(self, head=False)

            def do_HEAD(self) -> None:
                owner.handle(self, head=True)

        self.httpd = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        raise NotImplementedError

    @staticmethod
    def reply(h: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              head: bool = False, length: int | None = None) -> None:  # fmt: skip
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body) if length is None else length))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def send_ranged(self, h: BaseHTTPRequestHandler, data: bytes, head: bool, headers: dict[str, str],
                    honour_range: bool = True) -> None:  # fmt: skip
        rng = h.headers.get("Range")
        start = 0
        if rng and honour_range and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0])
            if start >= len(data):
                return self.reply(h, 416, headers={"Content-Range": f"bytes */{len(data)}"}, head=head)
            headers = {**headers, "Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
            return self.reply(h, 206, data[start:], {**headers, "Accept-Ranges": "bytes"}, head)
        return self.reply(h, 200, data, {**headers, "Accept-Ranges": "bytes"}, head)


class BlobStore(_Server):
    """Content-addressed blobs by sha256, with faults."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.faults = Faults()
        self.auth: list[str | None] = []  # the Authorization header of each request
        super().__init__()

    def add(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self.blobs[sha] = data
        return sha

    def handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = urlsplit(h.path).path
        self.faults.requests.append((path, h.headers.get("Range")))
        self.auth.append(h.headers.get("Authorization"))
        sha = path.rsplit("/", 1)[-1]
        data = self.blobs.get(sha)
        if data is None:
            return self.reply(h, 404, b"no such blob", head=head)
        f = self.faults
        once = (lambda s: None) if f.always else (lambda s: s.discard(sha) if isinstance(s, set) else s.pop(sha))
        if sha in f.corrupt:
            once(f.corrupt)
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        if sha in f.extra:
            n = f.extra[sha]
            once(f.extra)
            # declare the real size, send more (a server that lies in its body, not its headers)
            h.send_response(200)
            h.send_header("Content-Length", str(len(data) + n))
            h.end_headers()
            h.wfile.write(data + b"\0" * n)
            return None
        if sha in f.drop_after:
            cut = f.drop_after[sha]
            once(f.drop_after)
            start = int((h.headers.get("Range") or "bytes=0-")[6:].split("-")[0])
            body = data[start:]
            h.send_response(206 if start else 200)
            h.send_header("Content-Length", str(len(body)))
            if start:
                h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            h.end_headers()
            h.wfile.write(body[:cut])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)  # the rest never comes
            return None
        honour = sha not in f.ignore_range
        return self.send_ranged(h, data, head, {"Content-Type": "application/octet-stream"}, honour_range=honour)


@dataclass
class HubRepo:
    files: dict[str, bytes]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    gated: bool = False
    downloads: int = 0


class FakeHub(_Server):
    """The Hub's API and resolve endpoints for `repos` ("org/name" -> HubRepo); LFS files live in `blobs`."""

    def __init__(self, blobs: BlobStore) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.blobs = blobs
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Authorization)
        super().__init__()

    def add(self, repo: str, files: dict[str, bytes], **kw: Any) -> HubRepo:
        r = HubRepo(files, **kw)
        self.repos[repo] = r
        for data in files.values():
            if len(data) >= LFS_MIN_BYTES:
                self.blobs.add(data)
        return r

    def handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        u = urlsplit(h.path)
        path = unquote(u.path)
        self.requests.append(("HEAD" if head else "GET", path, h.headers.get("Authorization")))
        if path == "/api/models":
            return self._list(h, u.query)
        if path.startswith("/api/models/"):
            return self._info(h, path[len("/api/models/") :])
        parts = path.lstrip("/").split("/", 4)
        if len(parts) == 5 and parts[2] == "resolve":
            return self._resolve(h, head, f"{parts[0]}/{parts[1]}", parts[3], parts[4])
        return self.reply(h, 404, b"not found", head=head)

    def _repo_missing(self, h: BaseHTTPRequestHandler, head: bool = False) -> None:
        msg = "Repository not found"
        return self.reply(h, 401, json.dumps({"error": msg}).encode(),
                          {"X-Error-Code": "RepoNotFound", "X-Error-Message": msg}, head)  # fmt: skip

    def _info(self, h: BaseHTTPRequestHandler, rest: str) -> None:
        repo, _, rev = rest.partition("/revision/")
        r = self.repos.get(repo)
        if r is None:
            return self._repo_missing(h)
        siblings = []
        for name, data in sorted(r.files.items()):
            s: dict[str, Any] = {"rfilename": name, "size": len(data), "blobId": git_sha1(data)}
            if len(data) >= LFS_MIN_BYTES:
                s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            siblings.append(s)
        body = {
            "_id": "x", "id": repo, "modelId": repo, "author": repo.split("/")[0], "sha": r.sha,
            "private": False, "gated": "auto" if r.gated else False, "disabled": False, "downloads": r.downloads,
            "likes": 0, "tags": ["gguf"], "siblings": siblings, "lastModified": "2025-01-01T00:00:00.000Z",
            "createdAt": "2025-01-01T00:00:00.000Z",
        }  # fmt: skip
        return self.reply(h, 200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _resolve(self, h: BaseHTTPRequestHandler, head: bool, repo: str, rev: str, name: str) -> None:
        r = self.repos.get(repo)
        if r is None:
            return self._repo_missing(h, head)
        if r.gated and not h.headers.get("Authorization"):
            msg = f"Access to model {repo} is restricted. You must have access to it and be authenticated."
            return self.reply(h, 401, msg.encode(), {"X-Error-Code": "GatedRepo", "X-Error-Message": msg}, head)
        data = r.files.get(name)
        if data is None:
            return self.reply(h, 404, b"Entry not found", {"X-Error-Code": "EntryNotFound",
                                                           "X-Error-Message": "Entry not found"}, head)  # fmt: skip
        common = {"X-Repo-Commit": r.sha}
        if len(data) >= LFS_MIN_BYTES:
            sha = hashlib.sha256(data).hexdigest()
            headers = {**common, "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data)),
                       "ETag": f'"{git_sha1(data)}"', "Location": f"{self.blobs.url}/blobs/{sha}"}  # fmt: skip
            return self.reply(h, 302, b"", headers, head)
        return self.send_ranged(h, data, head, {**common, "ETag": f'"{git_sha1(data)}"'})

    def _list(self, h: BaseHTTPRequestHandler, query: str) -> None:
        from urllib.parse import parse_qs

        q = parse_qs(query)
        search = (q.get("search") or [""])[0].lower()
        rows = [
            {"_id": name, "id": name, "modelId": name, "downloads": r.downloads, "likes": 1, "tags": ["gguf"]}
            for name, r in sorted(self.repos.items(), key=lambda kv: -kv[1].downloads)
            if search in name.lower() and any(f.endswith(".gguf") for f in r.files)
        ]
        return self.reply(h, 200, json.dumps(rows).encode(), {"Content-Type": "application/json"})


class FakeIndex(_Server):
    """A simple repository API: /simple/{project}/ as PEP 691 JSON (or PEP 503 HTML with html=True),
    files at /files/{filename}."""

    def __init__(self, html: bool = False) -> None:
        self.projects: dict[str, dict[str, bytes]] = {}
        self.yanked: set[str] = set()
        self.html = html
        self.requests: list[str] = []
        super().__init__()

    def add(self, project: str, filename: str, data: bytes) -> None:
        self.projects.setdefault(project, {})[filename] = data

    def handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = urlsplit(h.path).path
        self.requests.append(path)
        if path.startswith("/files/"):
            data = next((f[path[7:]] for f in self.projects.values() if path[7:] in f), None)
            if data is None:
                return self.reply(h, 404, b"", head=head)
            return self.send_ranged(h, data, head, {"Content-Type": "application/octet-stream"})
        name = path.removeprefix("/simple/").strip("/")
        files = self.projects.get(name)
        if files is None:
            return self.reply(h, 404, b"not found", head=head)
        if self.html:
            links = "".join(
                f'<a href="../../files/{fn}#sha256={hashlib.sha256(d).hexdigest()}"'
                f"{' data-yanked' if fn in self.yanked else ''}>{fn}</a><br/>"
                for fn, d in files.items()
            )
            body = f"<html><body><h1>{name}</h1>{links}</body></html>".encode()
            return self.reply(h, 200, body, {"Content-Type": "text/html"}, head)
        rows = [{"filename": fn, "url": f"../../files/{fn}", "hashes": {"sha256": hashlib.sha256(d).hexdigest()},
                 "size": len(d), "yanked": fn in self.yanked} for fn, d in files.items()]  # fmt: skip
        body = json.dumps({"meta": {"api-version": "1.1"}, "name": name, "files": rows}).encode()
        return self.reply(h, 200, body, {"Content-Type": "application/vnd.pypi.simple.v1+json"}, head)


class FakeOllama(_Server):
    """The Ollama registry: /v2/{ns}/{name}/manifests/{tag} and /v2/{ns}/{name}/blobs/sha256:{hex} (307 to
    the blob store)."""

    MEDIA = "application/vnd.ollama.image."

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self.manifests: dict[str, bytes] = {}
        self.requests: list[str] = []
        super().__init__()

    def add(self, name: str, tag: str, layers: dict[str, bytes], ns: str = "library") -> dict[str, Any]:
        """layers: short media type ("model", "template", "params", ...) -> bytes; returns the manifest."""
        items = []
        for kind, data in layers.items():
            sha = self.blobs.add(data)
            items.append({"mediaType": self.MEDIA + kind, "digest": f"sha256:{sha}", "size": len(data)})
        config = self.blobs.add(b"{}")
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                               "digest": f"sha256:{config}", "size": 2}, "layers": items}  # fmt: skip
        self.manifests[f"/v2/{ns}/{name}/manifests/{tag}"] = json.dumps(manifest).encode()
        return manifest

    def handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = urlsplit(h.path).path
        self.requests.append(path)
        if "/manifests/" in path:
            body = self.manifests.get(path)
            if body is None:
                return self.reply(h, 404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}', head=head)
            return self.reply(h, 200, body, {"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"},
                              head)  # fmt: skip
        if "/blobs/sha256:" in path:
            sha = path.rsplit("sha256:", 1)[-1]
            return self.reply(h, 307, b"", {"Location": f"{self.blobs.url}/blobs/{sha}"}, head)
        return self.reply(h, 404, b"", head=head)
