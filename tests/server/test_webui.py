"""GET / and the web UI's static files: the page for browsers, 'Ollama is running' for API clients,
--no-webui, the API key (the page is public, the API is not), no path from the request is opened."""

from __future__ import annotations

import pytest

from modelc.server.webui import FILES

pytestmark = pytest.mark.anyio
HTML = {"Accept": "text/html,application/xhtml+xml"}


async def test_root_page_for_browsers_text_for_clients(make_client) -> None:
    c = make_client(api_key="k")
    page = await c.get("/", headers=HTML)
    assert page.status_code == 200 and page.content_type.startswith("text/html")
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert b'src="webui/main.js"' in await page.get_data()
    probe = await c.get("/")
    assert probe.status_code == 200 and (await probe.get_data()) == b"Ollama is running"
    assert (await c.http.head("/")).status_code == 200
    for name in ("main.js", "style.css", "markdown.js"):
        r = await c.get(f"/webui/{name}")
        assert r.status_code == 200 and (await r.get_data()) == FILES[name]
    assert (await c.get("/webui/main.js")).content_type.startswith("text/javascript")
    # the API behind the page still needs the key
    assert (await c.get("/v1/models")).status_code == 401
    assert (await c.get("/v1/models", headers={"Authorization": "Bearer k"})).status_code == 200


async def test_no_webui_and_unknown_files(make_client) -> None:
    c = make_client(webui=False)
    r = await c.get("/", headers=HTML)
    assert (await r.get_data()) == b"Ollama is running"
    assert (await c.get("/webui/main.js")).status_code == 404
    c = make_client()
    for path in ("/webui/..%2Fapp.py", "/webui/nope.js", "/webui/%2e%2e"):
        assert (await c.get(path)).status_code == 404


def test_assets_are_package_data() -> None:
    assert {"index.html", "main.js", "api.js", "markdown.js", "request.js", "store.js", "view.js", "style.css"} <= set(
        FILES
    )
    for name, data in FILES.items():
        assert b"http://" not in data.replace(b"http://127.0.0.1", b"") or name == "markdown.js"
        assert b"https://cdn" not in data and b"googleapis" not in data
