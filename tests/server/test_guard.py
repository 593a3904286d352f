"""Browser safety (Host, Origin, Content-Type, CORS) and control routes, on every route (server/guard.py)."""

from __future__ import annotations

import pytest
from quart import Blueprint

from modelc.errors import ModelcError
from modelc.server.guard import check_bind, control_route, host_allowed, split_host
from modelc.server.state import ServerConfig
from tests.server.conftest import error_of

pytestmark = pytest.mark.anyio
MSGS = [{"role": "user", "content": "hi"}]
CHAT = {"messages": MSGS, "max_tokens": 2}


def test_host_names() -> None:
    cfg = ServerConfig()
    for ok in ("localhost", "localhost:8080", "127.0.0.1:1", "[::1]:80", "10.0.0.5", "app.localhost", "LOCALHOST."):
        assert host_allowed(ok, cfg), ok
    for bad in ("evil.example", "evil.example:8080", "127.0.0.1.nip.io", "", None):
        assert not host_allowed(bad, cfg), bad
    assert host_allowed("models.lan:8080", ServerConfig(allowed_hosts=("models.lan",)))
    assert host_allowed("anything", ServerConfig(allowed_hosts=("*",)))
    assert split_host("[::1]:8080") == "::1" and split_host("A.B:9") == "a.b"


async def test_dns_rebinding_host_is_refused(client) -> None:
    err = await error_of(await client.get("/v1/models", headers={"Host": "evil.example"}), 403)
    assert "--allowed-hosts" in err["message"]
    assert (await client.get("/v1/models", headers={"Host": "127.0.0.1:8080"})).status_code == 200


async def test_allowed_hosts_flag(make_client) -> None:
    c = make_client(allowed_hosts=("models.lan",))
    assert (await c.get("/v1/models", headers={"Host": "models.lan:8080"})).status_code == 200
    assert (await c.get("/v1/models", headers={"Host": "other.lan"})).status_code == 403


async def test_cross_origin_simple_post_is_refused(client) -> None:
    # what a web page on another origin can send without a preflight: text/plain, its Origin
    page = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
    r = await client.http.post("/v1/chat/completions", data=b'{"messages": []}', headers=page)
    await error_of(r, 403)
    # the same body as text/plain from no origin (curl without -H): 415, not run
    r = await client.http.post("/v1/chat/completions", data=b'{"messages": []}', headers={"Content-Type": "text/plain"})
    err = await error_of(r, 415)
    assert "application/json" in err["message"]
    # JSON with an Origin that is not allowed: still refused
    await error_of(await client.post("/v1/chat/completions", CHAT, headers={"Origin": "http://evil.example"}), 403)
    # same origin (the page the server itself serves) and no Origin are fine
    same = {"Origin": "http://localhost", "Host": "localhost"}
    assert (await client.post("/v1/chat/completions", CHAT, headers=same)).status_code == 200
    assert (await client.post("/v1/chat/completions", CHAT)).status_code == 200


async def test_cors_only_for_listed_origins(make_client) -> None:
    c = make_client(cors_origins=("https://app.example",))
    ok = await c.post("/v1/chat/completions", CHAT, headers={"Origin": "https://app.example"})
    assert ok.status_code == 200 and ok.headers["Access-Control-Allow-Origin"] == "https://app.example"
    pre = await c.http.options(
        "/v1/chat/completions",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
    )
    assert pre.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert "Content-Type" in pre.headers["Access-Control-Allow-Headers"]
    other = await c.http.options("/v1/chat/completions", headers={"Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in other.headers
    plain = await c.get("/v1/models", headers={"Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in plain.headers
    await error_of(await c.post("/v1/chat/completions", CHAT, headers={"Origin": "https://evil.example"}), 403)


async def test_control_routes_need_token_or_key(make_client) -> None:
    body = {"path": "x"}
    none = make_client()
    err = await error_of(await none.post("/lora/load", body), 403)
    assert "control" in err["message"]
    tok = make_client(control_token="t" * 32)
    await error_of(await tok.post("/lora/load", body), 403)
    await error_of(await tok.post("/lora/load", body, headers={"Authorization": "Bearer wrong"}), 403)
    # the token passes the guard (the adapter is then looked up: 404, not 403)
    await error_of(await tok.post("/lora/load", body, headers={"Authorization": f"Bearer {'t' * 32}"}), 404)
    # inference stays open without an API key
    assert (await tok.post("/v1/chat/completions", CHAT)).status_code == 200
    key = make_client(api_key="k", control_token="t" * 32)
    await error_of(await key.post("/lora/load", body), 401)
    await error_of(await key.post("/lora/load", body, headers={"Authorization": "Bearer k"}), 404)
    # the control token is accepted wherever the key is
    r = await key.post("/v1/chat/completions", CHAT, headers={"Authorization": f"Bearer {'t' * 32}"})
    assert r.status_code == 200


async def test_routes_added_later_are_covered(make_client) -> None:
    """A blueprint registered after create_app (as new features do) gets every check without a list."""
    c = make_client(control_token="tok")
    bp = Blueprint("late", __name__)

    @bp.post("/late/open")
    async def late_open() -> dict:
        return {"ok": True}

    @bp.post("/late/control")
    @control_route
    async def late_control() -> dict:
        return {"ok": True}

    c.app.register_blueprint(bp)
    assert (await c.post("/late/open", {})).status_code == 200
    await error_of(await c.post("/late/open", {}, headers={"Origin": "http://evil.example"}), 403)
    await error_of(await c.get("/late/open", headers={"Host": "evil.example"}), 403)
    await error_of(await c.post("/late/control", {}), 403)
    assert (await c.post("/late/control", {}, headers={"Authorization": "Bearer tok"})).status_code == 200


def test_non_loopback_bind_needs_a_key() -> None:
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        check_bind(host, ServerConfig())
    with pytest.raises(ModelcError, match="--api-key"):
        check_bind("0.0.0.0", ServerConfig())
    with pytest.raises(ModelcError, match="--insecure-no-auth"):
        check_bind("192.168.1.4", ServerConfig())
    check_bind("0.0.0.0", ServerConfig(api_key="k"))
    check_bind("0.0.0.0", ServerConfig(insecure_no_auth=True))


async def test_serve_refuses_a_public_bind_without_key() -> None:
    from modelc.server.daemon import serve
    from tests.server.fake_engine import FakeEngine

    with pytest.raises(ModelcError, match="without --api-key"):
        await serve(FakeEngine(), host="0.0.0.0", port=0, install_signal_handlers=False)
