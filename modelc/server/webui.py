"""The chat web UI: GET / and GET /webui/<file>, static files shipped inside the package
(modelc/server/webui/: plain ES modules and CSS, nothing fetched from the network at run time).

GET / answers a browser (Accept: text/html) with the page and any other client (API clients that
probe the root, as they do Ollama's) with the plain text "Ollama is running". `--no-webui` keeps only
the plain-text answer. The files hold no data, so they are not behind --api-key: the page asks for
the key and sends it with every API call, which are. Files are served from a fixed list read at
import time: a request never names a path that gets opened.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from quart import Blueprint, Response, request

from modelc.errors import NotFoundError
from modelc.server import openapi_surfaces
from modelc.server.guard import public_route
from modelc.server.handling import get_state

OPENAPI_PATHS = openapi_surfaces.WEBUI
bp = Blueprint("webui", __name__)

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Everything the page may load comes from this server; API calls go to this origin only.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
ROOT_TEXT = "Ollama is running"  # what Ollama answers on GET /; clients probe it


def _load_files() -> dict[str, bytes]:
    folder = resources.files("modelc.server") / "webui"
    out = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in TYPES:
            out[entry.name] = entry.read_bytes()
    return out


FILES = _load_files()
PUBLIC_PATHS = frozenset({"/", *(f"/webui/{name}" for name in FILES)})


def is_public(path: str) -> bool:
    """The page and its assets (no API key, guard.public_route; not rate limited)."""
    return path in PUBLIC_PATHS


def _file(name: str) -> Response:
    suffix = "." + name.rsplit(".", 1)[-1]
    resp = Response(FILES[name], content_type=TYPES[suffix])
    resp.headers["Content-Security-Policy"] = CSP
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    resp.headers["Cache-Control"] = "no-cache"
    return resp


def wants_html() -> bool:
    accept = request.headers.get("Accept", "")
    return "text/html" in accept


@bp.get("/")
@public_route
async def root() -> Any:
    """The chat page for browsers; 'Ollama is running' for API clients."""
    if get_state().config.webui and wants_html() and "index.html" in FILES:
        return _file("index.html")
    return Response(ROOT_TEXT, content_type="text/plain; charset=utf-8")


@bp.get("/webui/<name>")
@public_route
async def asset(name: str) -> Any:
    """One of the page's static files."""
    if not get_state().config.webui or name not in FILES:
        raise NotFoundError("no such file")
    return _file(name)
