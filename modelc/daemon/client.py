"""DaemonClient: the CLI's HTTP client to a running daemon (httpx, synchronous).

Talks only to the daemon recorded in $MODELC_HOME/daemon.json (sending its control token), or to
MODELC_HOST when set (sending MODELC_API_KEY); with neither it guesses nothing and raises
NoDaemonError. Turns error bodies into ModelcErrors and a refused connection into
DaemonUnavailableError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from modelc.daemon.state_file import explicit_url, read_state
from modelc.errors import ModelcError

if TYPE_CHECKING:
    import httpx


def _httpx() -> Any:
    """httpx, imported on first use: `modelc run` and every other command load this module, few use it."""
    import httpx

    return httpx


class DaemonUnavailableError(ModelcError):
    """No daemon answers at the URL."""

    http_status = 503


class NoDaemonError(DaemonUnavailableError):
    """No daemon is recorded in $MODELC_HOME (and MODELC_HOST is not set)."""


class DaemonError(ModelcError):
    """The daemon answered with an error."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.http_status = status


class DaemonClient:
    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        timeout_s: float | None = None,
        token: str | None = None,
    ) -> None:
        info = read_state()
        if url is None:
            url = explicit_url() or (info.url if info is not None else None)
            if url is None:
                raise NoDaemonError(
                    "no modelc daemon is recorded in $MODELC_HOME (daemon.json); start one with "
                    "`modelc run --detach`, or set MODELC_HOST to reach another one"
                )
        self.url = url.rstrip("/")
        if token is None and info is not None and info.url.rstrip("/") == self.url:
            token = info.token  # the recorded daemon's control token goes only to that daemon
        key = api_key if api_key is not None else os.environ.get("MODELC_API_KEY")
        secret = token or key  # the control token is accepted wherever the API key is
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        httpx = _httpx()
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
        except _httpx().TransportError:
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
        except _httpx().TransportError:
            raise self.unavailable() from None

    def healthy(self) -> bool:
        try:
            return self._http.get("/health", timeout=2.0).status_code == 200
        except _httpx().TransportError:
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
