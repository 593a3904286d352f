"""DaemonClient: the CLI's HTTP client to a running daemon (httpx, synchronous).

Finds the daemon through MODELC_HOST or $MODELC_HOME/daemon.json, sends MODELC_API_KEY as a bearer
token, turns error bodies into ModelcErrors and a refused connection into DaemonUnavailableError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx

from modelc.daemon.state_file import daemon_url
from modelc.errors import ModelcError


class DaemonUnavailableError(ModelcError):
    """No daemon answers at the URL."""

    http_status = 503


class DaemonError(ModelcError):
    """The daemon answered with an error."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.http_status = status


class DaemonClient:
    def __init__(self, url: str | None = None, api_key: str | None = None, timeout_s: float | None = None) -> None:
        self.url = (url or daemon_url()).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("MODELC_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=5.0))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def unavailable(self) -> DaemonUnavailableError:
        return DaemonUnavailableError(f"no modelc daemon at {self.url}; start one with `modelc run --detach`")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One JSON round trip; returns the decoded body (None for an empty one)."""
        try:
            resp = self._http.request(method, path, json=body)
        except httpx.TransportError:
            raise self.unavailable() from None
        _check(resp, resp.content)
        return resp.json() if resp.content else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.request("POST", path, body)

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """POST and yield each NDJSON object as it arrives; an {"error"} line raises DaemonError."""
        try:
            with self._http.stream("POST", path, json=body) as resp:
                if resp.status_code >= 400:
                    _check(resp, resp.read())
                for line in resp.iter_lines():
                    if not line.strip():
                        continue
                    obj = json.loads(line)
                    if "error" in obj:
                        raise DaemonError(str(obj["error"]), status=500)
                    yield obj
        except httpx.TransportError:
            raise self.unavailable() from None

    def healthy(self) -> bool:
        try:
            return self._http.get("/health", timeout=2.0).status_code == 200
        except httpx.TransportError:
            return False


def _check(resp: httpx.Response, content: bytes) -> None:
    if resp.status_code < 400:
        return
    message = f"HTTP {resp.status_code}"
    try:
        err = json.loads(content).get("error")
        message = err.get("message", message) if isinstance(err, dict) else str(err or message)
    except (ValueError, AttributeError):
        pass
    raise DaemonError(message, status=resp.status_code)
