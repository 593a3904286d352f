from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from modelc.server.app import create_app
from modelc.server.sse import parse_sse
from modelc.server.state import ServerConfig, ServerState
from tests.server.fake_engine import FakeEngine


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Quart is asyncio-only


class Client:
    """A Quart test client plus the state and captured log lines."""

    def __init__(self, engine: Any, config: ServerConfig) -> None:
        self.engine = engine
        self.state = ServerState(engine, config)
        self.log = io.StringIO()
        self.app = create_app(self.state, log_stream=self.log)
        self.http = self.app.test_client()

    async def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        if body is None:
            return await self.http.post(path, **kw)
        return await self.http.post(path, json=body, **kw)

    async def get(self, path: str, **kw: Any) -> Any:
        return await self.http.get(path, **kw)

    async def sse(self, path: str, body: Any, **kw: Any) -> tuple[Any, list]:
        resp = await self.post(path, body, **kw)
        return resp, parse_sse(await resp.get_data())

    def log_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.log.getvalue().splitlines() if line.strip()]


@pytest.fixture
def make_client() -> Callable[..., Client]:
    def make(engine: Any = None, **config: Any) -> Client:
        return Client(engine if engine is not None else FakeEngine(), ServerConfig(**config))

    return make


@pytest.fixture
def client(make_client: Callable[..., Client]) -> Client:
    return make_client()


async def error_of(resp: Any, status: int, param: str | None = None) -> dict:
    assert resp.status_code == status, await resp.get_data()
    body = await resp.get_json()
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    if param is not None:
        assert err["param"] == param, err
    return err
