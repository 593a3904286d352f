from __future__ import annotations

import re

import pytest

from modelc.server.app import create_app
from modelc.server.openapi import openapi_spec
from modelc.server.state import ServerState

pytestmark = pytest.mark.anyio


def app_routes() -> dict[str, set[str]]:
    app = create_app(ServerState())
    routes: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule)
        routes.setdefault(path, set()).update(m.lower() for m in rule.methods - {"HEAD", "OPTIONS"})
    return routes


def test_every_route_is_described_and_nothing_else() -> None:
    app = create_app(ServerState())
    spec = openapi_spec(app)
    described = {path: set(ops) for path, ops in spec["paths"].items()}
    assert described == app_routes()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            assert op["summary"] and "200" in op["responses"], (path, method)
            if method == "post":
                assert "requestBody" in op, path


def test_server_routes_are_hand_written() -> None:
    app = create_app(ServerState())
    spec = openapi_spec(app)
    for rule in app.url_map.iter_rules():
        module = app.view_functions[rule.endpoint].__module__
        # The Ollama routes moved into modelc.server with the package floors (issue 14); their entries are
        # still generated from the views' docstrings, as when they lived in modelc.daemon.
        if module.startswith("modelc.server") and not module.startswith("modelc.server.ollama_"):
            path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule)
            for op in spec["paths"][path].values():
                assert "x-modelc-generated" not in op, path


async def test_served_spec_matches(client) -> None:
    body = await (await client.get("/openapi.json")).get_json()
    served = openapi_spec(client.app, client.engine, only_model=True)
    assert body["openapi"].startswith("3.") and body["paths"].keys() == served["paths"].keys()
    assert served["paths"].keys() < openapi_spec(client.app)["paths"].keys()  # less what the model cannot do


async def test_a_server_of_one_model_lists_its_names(make_client) -> None:
    """Any other `model` is a 404 there: the served spec says which names it takes (so a fuzzer reaches
    the routes' own logic); a daemon that loads stored models on demand keeps the field open."""
    c = make_client(model_aliases=("alias",))
    paths = (await (await c.get("/openapi.json")).get_json())["paths"]
    for path in ("/v1/chat/completions", "/api/chat", "/v1/messages", "/v1/rerank", "/api/generate"):
        if path not in paths:
            continue
        schema = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert schema["properties"]["model"]["enum"] == ["fake-model", "alias"], path
    assert (
        "enum"
        not in openapi_spec(c.app)["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"][
            "application/json"
        ]["schema"]["properties"]["model"]
    )
